"""Smoke test of the built images (`make images` runs it last): every entry point starts from
its image and answers its health endpoint.

A simulated cluster (simcluster, one node with a CRI ImageService socket) runs on the host;
each image runs under ``buildah run`` with the host's network and the cluster's
kubeconfigs and sockets bind-mounted read-only, as the image's own user, with the
arguments the manifests give it:

- server image: ``sandman-controller`` (/healthz on 8080's stand-in) and ``sandman-facade``;
- node-agent image: ``sandman-node-agent`` against the node's CRI socket, as uid 0;
- daemon-bundle image: the bundle's daemon through its own loader (the pod's argv), and the
  init container's ``/bin/busybox cp``.

Run from the development venv: ``.venv/bin/python -m devstack.image_smoke --tag 0.1.0``. Exits
non-zero naming the entry point that did not come up, with its output.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

__all__ = ["main"]

REPO = Path(__file__).resolve().parents[1]  # the checkout: simcluster runs from it


class SmokeError(RuntimeError):
    """An entry point did not answer its health endpoint in time."""


@dataclass(frozen=True)
class Entry:
    name: str
    image: str
    argv: tuple[str, ...]
    port: int
    path: str = "/healthz"
    env: tuple[tuple[str, str], ...] = ()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_http(url: str, process: subprocess.Popen[bytes], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SmokeError(f"exited with {process.returncode} before {url} answered")
        with suppress(OSError), urllib.request.urlopen(url, timeout=2) as answer:
            if answer.status == 200:
                return
        time.sleep(0.2)
    raise SmokeError(f"{url} did not answer 200 in {timeout_s:.0f} s")


@contextmanager
def simcluster(workdir: Path) -> Iterator[Path]:
    """A one-node simcluster serving CRI; yields its work directory."""
    cluster = workdir / "cluster"
    log = (workdir / "simcluster.log").open("wb")
    process = subprocess.Popen(
        [sys.executable, "-m", "simcluster", "up", "--profile", "dev", "--nodes", "1",
         "--workdir", str(cluster), "--set", "cri=true"],
        stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=REPO,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while (
            not (cluster / "cri-sockets.json").exists()
            or not (cluster / "kubeconfig-node-agent").exists()
        ):
            if process.poll() is not None or time.monotonic() > deadline:
                raise SmokeError(f"simcluster did not start: see {workdir / 'simcluster.log'}")
            time.sleep(0.2)
        time.sleep(1)  # the kubeconfigs are written before the nodes register
        yield cluster
    finally:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log.close()


def shared(cluster: Path, smoke: Path) -> None:
    """What the images read, world-readable (they run as uid 65532): kubeconfigs, the facade
    configuration and secret."""
    smoke.mkdir(mode=0o755)
    for name in ("kubeconfig-sandman", "kubeconfig-node-agent"):
        shutil.copy(cluster / name, smoke / name)
    secret = smoke / "secret"
    secret.write_text("s" * 48)
    token = "smoke-token"
    (smoke / "facade.yaml").write_text(
        json.dumps(
            {
                "secret_file": str(secret),
                "delivery": {"mode": "host-path", "host_path": "/var/lib/sandman/bundle/current"},
                "classes": [{"name": "tiny"}],
                "tenants": [
                    {"name": "smoke", "token_sha256": [hashlib.sha256(token.encode()).hexdigest()]}
                ],
            }
        )
    )
    for path in smoke.iterdir():
        path.chmod(0o644)


def entries(tag: str, cluster: Path, smoke: Path) -> list[Entry]:
    sockets = json.loads((cluster / "cri-sockets.json").read_text())
    node, cri_socket = next(iter(sockets.items()))
    server, agent = f"localhost/sandman/server:{tag}", f"localhost/sandman/node-agent:{tag}"
    bundle = f"localhost/sandman/daemon-bundle:{tag}"
    ports = [free_port() for _ in range(4)]
    return [
        Entry("controller", server, (
            "sandman-controller", f"--kubeconfig={smoke}/kubeconfig-sandman",
            "--health-host=127.0.0.1", f"--health-port={ports[0]}", "--no-election",
            "--no-view-server-side-unbound",
        ), ports[0]),
        Entry("facade", server, (
            "sandman-facade", f"--config={smoke}/facade.yaml",
            f"--kubeconfig={smoke}/kubeconfig-sandman", "--host=127.0.0.1", f"--port={ports[1]}",
        ), ports[1]),
        Entry("node agent", agent, (
            "sandman-node-agent", f"--node-name={node}",
            f"--kubeconfig={smoke}/kubeconfig-node-agent", f"--cri-socket={cri_socket}",
            "--state-dir=/tmp/agent-state", "--health-host=127.0.0.1",
            f"--health-port={ports[2]}",
        ), ports[2]),
        Entry("sandbox daemon", bundle, (
            "/sandman/_internal/ld-linux-x86-64.so.2", "--library-path", "/sandman/_internal",
            "/sandman/sandman-daemon", "--host", "127.0.0.1", "--port", str(ports[3]),
        ), ports[3], env=(("SANDMAN_TOKEN", "smoke"),)),
    ]  # fmt: skip


@contextmanager
def container(image: str) -> Iterator[str]:
    name = subprocess.run(
        ["buildah", "from", "--pull-never", image], check=True, capture_output=True, text=True
    ).stdout.strip()
    try:
        yield name
    finally:
        subprocess.run(["buildah", "rm", name], check=False, capture_output=True)


def run_entry(entry: Entry, mounts: list[Path], log_dir: Path) -> float:
    """Start one entry point in its image; seconds until its health endpoint answered."""
    with container(entry.image) as ctr:
        argv = ["buildah", "run", "--isolation", "chroot", "--network", "host"]
        for m in mounts:
            argv += ["-v", f"{m}:{m}:ro"]
        for key, value in entry.env:
            argv += ["--env", f"{key}={value}"]
        log = log_dir / f"{entry.name.replace(' ', '-')}.log"
        started = time.monotonic()
        with log.open("wb") as out:
            process = subprocess.Popen(
                [*argv, ctr, "--", *entry.argv], stdout=out, stderr=subprocess.STDOUT
            )
            try:
                wait_http(f"http://127.0.0.1:{entry.port}{entry.path}", process, 60)
                return time.monotonic() - started
            except SmokeError as e:
                raise SmokeError(f"{entry.name}: {e}\n{log.read_text()[-3000:]}") from e
            finally:
                process.terminate()
                try:
                    process.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()


def copy_works(tag: str) -> None:
    """The init container's copy, as the pod runs it (into a writable directory)."""
    image = f"localhost/sandman/daemon-bundle:{tag}"
    with container(image) as ctr, tempfile.TemporaryDirectory() as out:
        Path(out).chmod(0o777)
        subprocess.run(
            ["buildah", "run", "--isolation", "chroot", "-v", f"{out}:/bundle", ctr, "--",
             "/bin/busybox", "cp", "-a", "/sandman/.", "/bundle/"],
            check=True, capture_output=True,
        )  # fmt: skip
        if not (Path(out) / "bundle.json").exists():
            raise SmokeError("the init container's copy left no bundle.json in /bundle")


def main(argv: list[str] | None = None) -> int:
    summary = (__doc__ or "").split("\n\n")[0]
    p = argparse.ArgumentParser(prog="python -m devstack.image_smoke", description=summary)
    p.add_argument("--tag", default="0.1.0")
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="sandman-smoke-") as tmp:
        workdir = Path(tmp)
        workdir.chmod(0o755)
        with simcluster(workdir) as cluster:
            smoke = workdir / "shared"
            shared(cluster, smoke)
            listed = json.loads((cluster / "cri-sockets.json").read_text())
            sockets = {Path(s).parent for s in listed.values()}
            try:
                for entry in entries(args.tag, cluster, smoke):
                    seconds = run_entry(entry, [smoke, *sorted(sockets)], workdir)
                    print(f"smoke: {entry.name} ({entry.image}) healthy in {seconds:.1f} s")
                copy_works(args.tag)
                print("smoke: the init container's busybox copy works")
            except SmokeError as e:
                print(f"smoke: FAILED: {e}", file=sys.stderr)
                return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
