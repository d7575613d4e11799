"""The self-contained daemon bundle, run as PID 1 of a rootfs with neither Python nor a libc.

The bundle is built once per session with the real build (`daemon.sandbox.bundle.build`, the
code behind `make bundle`); the rootfs is busybox-static plus applet symlinks and nothing
else. Every test starts its own daemon in that rootfs under bubblewrap with exactly the argv
a pod spec uses (`layout.bundle_command`) and talks to it over loopback HTTP, so what passes
here is what a pod running an unmodified image gets.

Missing bubblewrap or busybox-static is a failure, not a skip: `make test` installs both, and
a silently skipped bundle test would hide a broken delivery path.
"""

from __future__ import annotations

import http.client
import json
import os
import secrets
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from daemon.sandbox import bundle, layout
from daemon.sandbox.bundle import elf_interpreter
from daemon.sandbox.settings import DaemonSettings
from devstack.rootfs import (
    RootfsDaemon,
    RootfsError,
    build_busybox_rootfs,
    free_port,
    start_in_rootfs,
)
from load.bench.daemon_startup import measure_startup
from sandman.sdk.daemon_client import SandboxClient

pytestmark = [pytest.mark.bundle, pytest.mark.timeout(300)]

# Never imported by the daemon server; their presence would mean a bloated bundle.
HEAVY_MODULES = {"aiohttp", "kr8s", "kubernetes", "ssl", "tkinter", "unittest", "pydoc"}


@pytest.fixture(scope="session")
def rootfs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    try:
        return build_busybox_rootfs(tmp_path_factory.mktemp("rootfs"))
    except RootfsError as exc:
        pytest.fail(str(exc))


def _start(
    bundle_dir: Path, rootfs: Path, tmp_path: Path, env: dict[str, str] | None = None
) -> RootfsDaemon:
    port = free_port()
    command = layout.bundle_command(host="127.0.0.1", port=port)
    return start_in_rootfs(
        rootfs,
        bundle_dir,
        command,
        port=port,
        token=secrets.token_hex(16),
        log_path=tmp_path / "daemon.log",
        extra_env=env,
    )


@pytest.fixture
def bundled(bundle_dir: Path, rootfs: Path, tmp_path: Path) -> Iterator[RootfsDaemon]:
    running = _start(bundle_dir, rootfs, tmp_path)
    try:
        running.wait_healthy()
        yield running
    finally:
        running.stop()


def get(daemon: RootfsDaemon, path: str, token: str | None) -> tuple[int, bytes]:
    """A plain HTTP GET (no client library); no Authorization header if `token` is None."""
    conn = http.client.HTTPConnection("127.0.0.1", daemon.port, timeout=30)
    headers = {} if token is None else {"Authorization": f"Bearer {token}"}
    try:
        conn.request("GET", path, headers=headers)
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


def client_for(daemon: RootfsDaemon) -> SandboxClient:
    return SandboxClient(daemon.base_url, daemon.token)


async def sh(client: SandboxClient, command: str) -> str:
    """stdout of `command` run by the image's /bin/sh (busybox); fails on a non-zero exit."""
    result = await client.exec(command=command, timeout_s=20)
    assert result.exit_code == 0, result
    assert result.stdout.encoding == "utf-8", result
    return result.stdout.data


# -- the build ------------------------------------------------------------------------------


def test_bundle_carries_loader_and_libc_and_a_matching_manifest(bundle_dir: Path) -> None:
    manifest = json.loads((bundle_dir / layout.MANIFEST).read_text())
    libdir = bundle_dir / layout.LIBDIR
    for name in (layout.loader_name(), "libc.so.6", "libpthread.so.0", "libdl.so.2", "libm.so.6"):
        assert (libdir / name).is_file(), name
    assert (libdir / "libz.so.1").is_file()
    assert manifest["pod_command"] == layout.bundle_command(host="0.0.0.0")
    assert manifest["loader"] == f"{layout.LIBDIR}/{layout.loader_name()}"
    assert manifest["size_bytes"] < 40 * 2**20, "bundle grew beyond 40 MiB"


def test_bundle_leaves_out_modules_the_daemon_never_imports(bundle_dir: Path) -> None:
    from PyInstaller.archive.readers import CArchiveReader

    archive = CArchiveReader(str(bundle_dir / layout.EXECUTABLE))
    pyz = next(name for name in archive.toc if name.endswith(".pyz"))
    modules = set(archive.open_embedded_archive(pyz).toc)
    assert "daemon.sandbox.server" in modules
    assert {m.split(".")[0] for m in modules} & HEAVY_MODULES == set()
    assert not list((bundle_dir / layout.LIBDIR).glob("libssl*"))


def test_closure_check_rejects_a_library_missing_from_the_bundle(
    bundle_dir: Path, tmp_path: Path
) -> None:
    broken = tmp_path / "broken"
    shutil.copytree(bundle_dir, broken, symlinks=True)
    (broken / layout.LIBDIR / "libm.so.6").unlink()
    with pytest.raises(bundle.BundleError, match=r"libm\.so\.6"):
        bundle.verify_closure(broken)


def test_the_start_command_names_the_files_the_build_lays_out(bundle_dir: Path) -> None:
    argv = layout.bundle_command(host="0.0.0.0", mount=str(bundle_dir))
    assert Path(argv[0]).is_file() and Path(argv[0]).name == layout.loader_name()
    assert Path(argv[2]) == bundle_dir / layout.LIBDIR and Path(argv[2]).is_dir()
    assert Path(argv[3]).is_file() and os.access(argv[3], os.X_OK)
    assert argv[-2:] == ["--port", str(DaemonSettings(token="t").port)]


# -- the rootfs really is libc-free ---------------------------------------------------------


def test_rootfs_has_no_libc_so_the_bundle_cannot_start_without_its_loader(
    bundle_dir: Path, rootfs: Path, tmp_path: Path
) -> None:
    assert elf_interpreter(rootfs / "bin" / "busybox") is None
    assert not [p for p in rootfs.rglob("*.so*")], "rootfs must not contain shared libraries"
    port = free_port()
    direct = [f"{layout.BUNDLE_MOUNT}/{layout.EXECUTABLE}", "--port", str(port)]
    started = start_in_rootfs(
        rootfs, bundle_dir, direct, port=port, token="t", log_path=tmp_path / "direct.log"
    )
    try:
        assert started.proc.wait(timeout=20) != 0
        # the kernel cannot find the PT_INTERP (/lib64/ld-linux-*.so.*) the bootloader names
        assert "No such file or directory" in started.log(), started.log()
    finally:
        started.stop()


# -- the daemon inside the rootfs -----------------------------------------------------------


def test_healthz_is_open_and_the_api_needs_the_token(bundled: RootfsDaemon) -> None:
    assert get(bundled, "/healthz", None)[0] == 200
    assert get(bundled, "/v1/info", None)[0] == 401
    assert get(bundled, "/v1/info", "wrong")[0] == 401
    status, info = get(bundled, "/v1/info", bundled.token)
    assert status == 200
    assert json.loads(info)["is_pid1"] is True


@pytest.mark.anyio
async def test_exec_runs_busybox_sh_with_a_clean_environment(bundled: RootfsDaemon) -> None:
    async with client_for(bundled) as client:
        assert await sh(client, "echo hi") == "hi\n"
        env = (await sh(client, "env")).splitlines()
    assert not [line for line in env if line.startswith(("LD_LIBRARY_PATH", "_PYI_"))], env
    assert not [line for line in env if line.startswith("SANDMAN_TOKEN")], env
    assert "PATH=/bin" in env


@pytest.mark.anyio
async def test_image_environment_neither_disturbs_the_daemon_nor_is_changed_for_children(
    bundle_dir: Path, rootfs: Path, tmp_path: Path
) -> None:
    image_env = {
        "LD_LIBRARY_PATH": "/opt/image/lib",
        "PYTHONHOME": "/opt/image/python",
        "PYTHONPATH": "/opt/image/site",
    }
    running = _start(bundle_dir, rootfs, tmp_path, env=image_env)
    try:
        running.wait_healthy()
        async with client_for(running) as client:
            env = (await sh(client, "env")).splitlines()
        assert {f"{k}={v}" for k, v in image_env.items()} <= set(env), env
        assert not [line for line in env if line.startswith(("LD_LIBRARY_PATH_ORIG", "_PYI_"))]
    finally:
        running.stop()


@pytest.mark.anyio
async def test_session_keeps_cwd_and_variables(bundled: RootfsDaemon) -> None:
    async with client_for(bundled) as client:
        session = await client.create_session("main")
        assert session.shell.endswith("sh")
        first = await client.run_in_session("main", "cd /tmp && X=42", timeout_s=20)
        second = await client.run_in_session("main", 'echo "$PWD $X"', timeout_s=20)
        await client.close_session("main")
    assert first.exit_code == 0, first
    assert second.exit_code == 0, second
    assert second.output.data.strip().endswith("/tmp 42"), second


@pytest.mark.anyio
async def test_file_write_then_read(bundled: RootfsDaemon) -> None:
    payload = bytes(range(256)) * 64
    async with client_for(bundled) as client:
        stat = await client.write_file("/tmp/deep/blob.bin", payload)
        assert stat.size == len(payload)
        assert await client.read_file("/tmp/deep/blob.bin") == payload
        assert (await sh(client, "wc -c < /tmp/deep/blob.bin")).strip() == str(len(payload))


@pytest.mark.anyio
async def test_sigterm_exits_cleanly_with_a_background_child_running(
    bundle_dir: Path, rootfs: Path, tmp_path: Path
) -> None:
    running = _start(bundle_dir, rootfs, tmp_path)
    try:
        running.wait_healthy()
        async with client_for(running) as client:
            sleeper = await client.start_process(argv=["sleep", "300"])
            assert sleeper.running
        started = time.monotonic()
        assert running.terminate(grace_s=10) == 0, running.log()
        assert time.monotonic() - started < 5
    finally:
        running.stop()


def test_measure_startup_reports_figures(bundle_dir: Path, rootfs: Path) -> None:
    figures = measure_startup(bundle_dir, runs=2, rootfs=rootfs, idle_s=0.2)
    assert len(figures.start_to_healthy_s) == 2
    assert 0 < figures.median_s <= figures.p90_s <= figures.max_s < 20
    assert figures.idle_rss_bytes > 1 * 2**20
    assert figures.bundle_bytes > 1 * 2**20
