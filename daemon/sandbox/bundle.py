"""Build the self-contained sandbox-daemon bundle: the daemon for images without Python or libc.

The daemon is PID 1 of an *unmodified* task image. Such an image may have no Python, and (e.g.
a busybox-static or distroless-static image) no libc either; if it has a glibc, it is of some
unknown version. So the bundle brings everything itself:

- a PyInstaller **onedir** build of `daemon.sandbox.__main__` (onedir, not onefile: onefile
  unpacks ~10 MB to /tmp on every start, which costs ~150 ms and needs a writable /tmp);
- the dynamic loader (`ld-linux-*.so.*`) and every shared library the bootloader, libpython
  and the extension modules need, libc included (`ldd` closure), next to PyInstaller's own
  collected libraries in `_internal/`;
- `bundle.json`, a manifest with the exact pod argv, loader, glibc and Python versions.

The bootloader is started *through the bundled loader*, so the image's own `/lib` (if any)
is never consulted and no shell is needed (see `pod_command`). Two PyInstaller details shape
the layout (checked against PyInstaller 6.x):

- started as `ld.so ./sandman-daemon`, `/proc/self/exe` is the loader; the bootloader
  recognises the `ld-*.so.*` name, falls back to argv[0] to find itself, and remembers to
  restart through the same loader;
- on Linux a onedir app always restarts itself once (execve, same PID) with
  `LD_LIBRARY_PATH=<bundle>/_internal`, *without* the loader's `--library-path`. The libc
  therefore has to live in `_internal/` as well, or the restarted process cannot start.

That restart leaves bundle-private variables in the daemon's environment (`LD_LIBRARY_PATH`
pointing at our glibc, `LD_LIBRARY_PATH_ORIG`, `_PYI_*`). A child built against the image's
libc must never see them, so a runtime hook baked into the bundle restores the environment
before any daemon code runs (`_RUNTIME_HOOK`). Already-loaded libraries are unaffected: the
loader reads `LD_LIBRARY_PATH` once, at process start.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from .bundle_rootfs import (
    BUNDLE_MOUNT,
    RootfsDaemon,
    build_busybox_rootfs,
    elf_interpreter,
    free_port,
    start_in_rootfs,
)

EXECUTABLE = "sandman-daemon"
LIBDIR = "_internal"
MANIFEST = "bundle.json"
ENTRY_MODULE = "daemon.sandbox.__main__"
DEFAULT_PORT = 8790  # the daemon's own default (DaemonSettings.port)

# The loader's file name per architecture (the ELF PT_INTERP basename); the bootloader's
# "started through ld.so" detection relies on the `ld-*.so.*` pattern, so keep the names.
LOADERS = {"x86_64": "ld-linux-x86-64.so.2", "aarch64": "ld-linux-aarch64.so.1"}

# glibc pieces that `ldd` does not show because they are dlopen()ed at run time:
# libgcc_s is loaded by glibc for thread cancellation/pthread_exit (Python threads at
# interpreter shutdown). NSS "files"/"dns" are built into libc since glibc 2.34.
DLOPENED_LIBS = ("libgcc_s.so.1",)

# Never imported by the daemon server, or only as optional imports it does not need. Leaving
# them out keeps the bundle small, and turns an accidental import of a heavy client library
# into an ImportError that the bundle tests catch.
EXCLUDES = (
    "tkinter", "_tkinter", "unittest", "pydoc", "pydoc_data", "doctest", "idlelib", "turtle",
    "ssl", "_ssl", "_hashlib", "lzma", "_lzma", "bz2", "_bz2", "sqlite3", "_sqlite3",
    "xml", "xmlrpc", "pyexpat", "multiprocessing", "lib2to3", "curses", "readline", "dbm",
    "ensurepip", "venv", "distutils", "setuptools", "pkg_resources", "_distutils_hack", "pip",
    "aiohttp", "kr8s", "kubernetes", "httpx", "yaml", "prometheus_client", "urllib3",
    "requests", "pytest", "hypothesis", "psutil", "mypy",
    # Optional for msgspec on Python >= 3.11 (it falls back to `typing`; attrs support is
    # only imported when an attrs class is encoded): ~4 ms less import time at start.
    "typing_extensions", "attr", "attrs",
    # CJK codecs (~0.9 MB): the daemon only ever decodes UTF-8.
    "_multibytecodec", "_codecs_cn", "_codecs_hk", "_codecs_iso2022", "_codecs_jp",
    "_codecs_kr", "_codecs_tw",
)  # fmt: skip

_RUNTIME_HOOK = '''\
"""Sandman bundle runtime hook: give the daemon (and so its children) a clean environment.

PyInstaller's onedir restart put the bundle's library directory (holding our glibc) into
LD_LIBRARY_PATH and added _PYI_* bookkeeping variables. Children of the daemon run the
image's binaries against the image's libc and must see the environment the container had.
"""
import os

_orig = os.environ.pop("LD_LIBRARY_PATH_ORIG", None)
if _orig is not None:
    os.environ["LD_LIBRARY_PATH"] = _orig
else:
    os.environ.pop("LD_LIBRARY_PATH", None)
for _key in [k for k in os.environ if k.startswith("_PYI_")]:
    del os.environ[_key]
'''

_ENTRY_SCRIPT = """\
from {module} import main

raise SystemExit(main())
"""


class BundleError(RuntimeError):
    """The bundle cannot be built or does not hold together; the message says why."""


def loader_name(machine: str | None = None) -> str:
    """The dynamic loader's file name for `machine` (default: this host)."""
    machine = machine or platform.machine()
    try:
        return LOADERS[machine]
    except KeyError:
        raise BundleError(f"no glibc loader name known for machine {machine!r}")


def pod_command(
    mount: str = BUNDLE_MOUNT,
    *,
    host: str = "0.0.0.0",
    port: int = DEFAULT_PORT,
    machine: str | None = None,
) -> list[str]:
    """The exact container `command` that starts the daemon from a bundle mounted at `mount`.

    No shell, no PATH lookup, no environment variable: it works in a rootfs with no /bin/sh
    and no libc. The token comes from the `SANDMAN_TOKEN` environment variable.
    """
    lib = f"{mount}/{LIBDIR}"
    loader = f"{lib}/{loader_name(machine)}"
    return [loader, "--library-path", lib, f"{mount}/{EXECUTABLE}", "--host", host,
            "--port", str(port)]  # fmt: skip


def _require_tools() -> None:
    missing = [tool for tool in ("ldd", "objdump", "strip") if shutil.which(tool) is None]
    if missing:
        raise BundleError(
            f"missing build tools {missing}: PyInstaller needs ldd (libc-bin) and objdump/strip "
            "(apt-get install binutils)"
        )


def _run_pyinstaller(work: Path, entry_module: str, repo_root: Path) -> Path:
    """Run PyInstaller (onedir) into `work/dist`; return the app folder."""
    entry = work / "sandman_daemon_entry.py"
    entry.write_text(_ENTRY_SCRIPT.format(module=entry_module))
    hook = work / "pyi_rth_sandman_env.py"
    hook.write_text(_RUNTIME_HOOK)
    cmd = [sys.executable, "-m", "PyInstaller", "--noconfirm", "--onedir", "--name", EXECUTABLE]
    cmd += ["--distpath", str(work / "dist"), "--workpath", str(work / "pyi")]
    cmd += ["--specpath", str(work), "--paths", str(repo_root), "--runtime-hook", str(hook)]
    cmd += ["--strip", "--noupx", "--log-level", "WARN", "--contents-directory", LIBDIR]
    cmd += ["--optimize", "2"]
    for name in EXCLUDES:
        cmd += ["--exclude-module", name]
    proc = subprocess.run([*cmd, str(entry)], capture_output=True, text=True)
    if proc.returncode != 0:
        raise BundleError(f"PyInstaller failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
    return work / "dist" / EXECUTABLE


def _elf_files(root: Path) -> Iterator[Path]:
    for path in sorted(root.rglob("*")):
        if path.is_file() and not path.is_symlink():
            with path.open("rb") as f:
                if f.read(4) == b"\x7fELF":
                    yield path


def _ldd(path: Path) -> dict[str, Path]:
    """soname -> host path for everything `ldd` resolves for `path` (loader included)."""
    out = subprocess.run(["ldd", str(path)], capture_output=True, text=True).stdout
    deps: dict[str, Path] = {}
    for line in out.splitlines():
        parts = line.split()
        if "=>" in parts and len(parts) >= 3 and parts[2].startswith("/"):
            deps[parts[0]] = Path(parts[2])
        elif parts and parts[0].startswith("/"):
            deps[Path(parts[0]).name] = Path(parts[0])
    return deps


def _add_system_libs(app: Path) -> list[str]:
    """Copy the loader, libc and every other host library the bundle links to into _internal."""
    libdir = app / LIBDIR
    interp = elf_interpreter(app / EXECUTABLE)
    if interp is None:
        raise BundleError("the PyInstaller bootloader is unexpectedly static")
    wanted: dict[str, Path] = {Path(interp).name: Path(interp)}
    for elf in _elf_files(app):
        wanted.update(_ldd(elf))
    if "libc.so.6" not in wanted:
        raise BundleError("the build host's Python is not linked against glibc (libc.so.6)")
    libc_dir = wanted["libc.so.6"].resolve().parent
    wanted.update({name: libc_dir / name for name in DLOPENED_LIBS})
    added = []
    for name, src in sorted(wanted.items()):
        dest = libdir / name
        if not dest.exists():
            shutil.copy2(src.resolve(), dest)
            added.append(name)
    (libdir / Path(interp).name).chmod(0o755)
    return added


def verify_closure(app: Path) -> None:
    """Every ELF in the bundle must resolve, through the *bundled* loader, inside _internal."""
    libdir = app / LIBDIR
    loader = libdir / loader_name()
    for elf in _elf_files(app):
        if elf == loader:
            continue
        cmd = [str(loader), "--library-path", str(libdir), "--list", str(elf)]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            raise BundleError(f"bundled loader cannot list {elf.relative_to(app)}: {proc.stderr}")
        for line in proc.stdout.splitlines():
            parts = line.split()
            if "=>" not in parts:
                continue
            target = parts[2] if len(parts) > 2 else "not"
            if target == "not" or not target.startswith(str(libdir)):
                raise BundleError(f"{elf.relative_to(app)} needs {parts[0]} from {target}")


def dir_size(path: Path) -> int:
    """Bytes on disk (like `du -s`), counting each file once."""
    return sum(p.lstat().st_blocks * 512 for p in path.rglob("*")) + path.lstat().st_blocks * 512


def _write_manifest(app: Path, added: list[str]) -> dict[str, object]:
    manifest: dict[str, object] = {
        "format": 1,
        "executable": EXECUTABLE,
        "library_dir": LIBDIR,
        "loader": f"{LIBDIR}/{loader_name()}",
        "machine": platform.machine(),
        "glibc": (os.confstr("CS_GNU_LIBC_VERSION") or "").removeprefix("glibc "),
        "python": platform.python_version(),
        "system_libs": added,
        "pod_command": pod_command(),
        "size_bytes": dir_size(app),
    }
    (app / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
    return manifest


def build(
    out: Path, *, work: Path | None = None, entry_module: str = ENTRY_MODULE
) -> dict[str, object]:
    """Build the bundle into `out` and return its manifest.

    `out` is replaced only once the new bundle is complete and its closure verified.
    """
    _require_tools()
    repo_root = Path(__file__).resolve().parents[2]
    out = out.resolve()
    work = (work or out.parent / f"{out.name}.work").resolve()
    work.mkdir(parents=True, exist_ok=True)
    app = _run_pyinstaller(work, entry_module, repo_root)
    added = _add_system_libs(app)
    verify_closure(app)
    manifest = _write_manifest(app, added)
    staging = out.parent / f".{out.name}.new"
    shutil.rmtree(staging, ignore_errors=True)
    shutil.move(str(app), staging)
    shutil.rmtree(out, ignore_errors=True)
    staging.rename(out)
    return manifest


@dataclass
class StartupFigures:
    """What `measure_startup` reports (seconds and bytes).

    `venv_*` is the same daemon started on the host from the build interpreter
    (`python -m daemon.sandbox`), sampled alternately with the bundle so both see the same
    machine noise: their ratio is the figure to quote, not either absolute time.
    """

    runs: int
    start_to_healthy_s: list[float]
    median_s: float
    max_s: float
    venv_median_s: float
    bundle_over_venv: float
    idle_rss_bytes: int
    bundle_bytes: int


def _rss_bytes(pid: int | None) -> int:
    if pid is None:
        return 0
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def _bundle_sample(
    bundle: Path, rootfs: Path, log: Path, idle_s: float | None
) -> tuple[float, int]:
    """One start of the bundle in the rootfs: (seconds to healthy, idle RSS or 0)."""
    port = free_port()
    cmd = pod_command(host="127.0.0.1", port=port)
    daemon = start_in_rootfs(rootfs, bundle, cmd, port=port, token="bench", log_path=log)
    try:
        elapsed = daemon.wait_healthy()
        if idle_s is None:
            return elapsed, 0
        time.sleep(idle_s)
        return elapsed, _rss_bytes(daemon.daemon_pid())
    finally:
        daemon.stop()


def _venv_sample(log: Path) -> float:
    """One start of the daemon from this interpreter on the host: seconds to healthy."""
    port = free_port()
    argv = [sys.executable, "-m", ENTRY_MODULE.removesuffix(".__main__"), "--host", "127.0.0.1"]
    env = {**os.environ, "SANDMAN_TOKEN": "bench"}
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # compare against cached bytecode, as bundled
    with log.open("ab") as out:
        proc = subprocess.Popen([*argv, "--port", str(port)], env=env, stdout=out, stderr=out)
    daemon = RootfsDaemon(proc=proc, port=port, token="bench", log_path=log)
    try:
        return daemon.wait_healthy()
    finally:
        daemon.stop()


def measure_startup(
    bundle: Path,
    runs: int = 10,
    rootfs: Path | None = None,
    idle_s: float = 1.0,
    progress: Callable[[int, float, float], None] | None = None,
) -> StartupFigures:
    """Start the bundle `runs` times as PID 1 of a busybox rootfs under bubblewrap.

    Each sample is the time from spawning bwrap to the first 200 from /healthz (so it
    includes bwrap's ~4 ms). The idle RSS is the daemon's VmRSS `idle_s` after the last start.
    `progress(run, bundle_s, venv_s)` is called after each pair of samples.
    """
    with tempfile.TemporaryDirectory(prefix="sandman-bench-") as tmp:
        rootfs = rootfs or build_busybox_rootfs(Path(tmp) / "rootfs")
        log = Path(tmp) / "daemon.log"
        samples, venv, rss = [], [], 0
        for i in range(runs):
            elapsed, rss = _bundle_sample(bundle, rootfs, log, idle_s if i == runs - 1 else None)
            samples.append(elapsed)
            venv.append(_venv_sample(log))
            if progress is not None:
                progress(i + 1, samples[-1], venv[-1])
    median = statistics.median(samples)
    return StartupFigures(
        runs=runs,
        start_to_healthy_s=samples,
        median_s=median,
        max_s=max(samples),
        venv_median_s=statistics.median(venv),
        bundle_over_venv=median / statistics.median(venv),
        idle_rss_bytes=rss,
        bundle_bytes=dir_size(bundle),
    )


def _print_progress(run: int, bundle_s: float, venv_s: float) -> None:
    print(f"run {run}: bundle {bundle_s * 1e3:.1f} ms, venv {venv_s * 1e3:.1f} ms", file=sys.stderr)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m daemon.sandbox.bundle", description=__doc__)
    sub = parser.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build", help="build the bundle")
    b.add_argument("--out", type=Path, required=True)
    b.add_argument("--work", type=Path, help="PyInstaller work dir (default: <out>.work)")
    m = sub.add_parser("measure", help="start-to-healthy, idle RSS and size of a bundle")
    m.add_argument("--bundle", type=Path, required=True)
    m.add_argument("--runs", type=int, default=10)
    c = sub.add_parser("command", help="print the pod argv as JSON")
    c.add_argument("--mount", default=BUNDLE_MOUNT)
    c.add_argument("--port", type=int, default=DEFAULT_PORT)
    args = parser.parse_args(argv)
    if args.cmd == "build":
        print(f"bundle: building {args.out} with PyInstaller (about 15-40 s)...", flush=True)
        started = time.monotonic()
        manifest = build(args.out, work=args.work)
        size_mib = int(str(manifest["size_bytes"])) / 2**20
        print(f"bundle: done in {time.monotonic() - started:.1f} s, {size_mib:.1f} MiB")
        print("bundle: pod command:", json.dumps(manifest["pod_command"]))
    elif args.cmd == "measure":
        figures = measure_startup(args.bundle.resolve(), args.runs, progress=_print_progress)
        print(json.dumps(asdict(figures), indent=2))
    else:
        print(json.dumps(pod_command(args.mount, port=args.port)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
