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
is never consulted and no shell is needed (`layout.bundle_command`). Two PyInstaller details shape
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
import struct
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import sandman.wire

from .layout import (
    BUNDLE_MOUNT,
    DAEMON_PORT,
    ENTRY_MODULE,
    EXECUTABLE,
    LIBDIR,
    MANIFEST,
    UnknownMachine,
    bundle_command,
    loader_name,
)

__all__ = ["BundleError", "build", "dir_size", "elf_interpreter", "main", "verify_closure"]

_PT_INTERP = 3

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
    # aiohttp's URL library, which the SDK (sandman.sdk.ports) imports beside aiohttp: the
    # analysis reaches the SDK through sandman/__init__'s type-checking import, and yarl's
    # optional pydantic support would pull in rich, pygments, PIL and numpy.
    "yarl", "pydantic", "pydantic_core",
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


def elf_interpreter(path: Path) -> str | None:
    """The PT_INTERP (dynamic loader) an ELF file asks for, or None if it is static.

    A tiny parser instead of `readelf`, so the check works without binutils: 64-bit
    little-endian ELF only, which is what x86_64 and aarch64 Linux use.
    """
    with path.open("rb") as f:
        ident = f.read(64)
        if ident[:4] != b"\x7fELF" or ident[4] != 2 or ident[5] != 1:
            raise BundleError(f"{path} is not a 64-bit little-endian ELF file")
        (phoff,) = struct.unpack_from("<Q", ident, 0x20)
        phentsize, phnum = struct.unpack_from("<HH", ident, 0x36)
        f.seek(phoff)
        table = f.read(phentsize * phnum)
        for i in range(phnum):
            p_type, _flags, p_offset, _va, _pa, p_filesz = struct.unpack_from(
                "<IIQQQQ", table, i * phentsize
            )
            if p_type == _PT_INTERP:
                f.seek(p_offset)
                return f.read(p_filesz).rstrip(b"\0").decode()
    return None


def _loader() -> str:
    try:
        return loader_name()
    except UnknownMachine as e:
        raise BundleError(str(e)) from e


def _require_tools() -> None:
    missing = [tool for tool in ("ldd", "objdump", "strip") if shutil.which(tool) is None]
    if missing:
        raise BundleError(
            f"missing build tools {missing}: PyInstaller needs ldd (libc-bin) and objdump/strip "
            "(apt-get install binutils)"
        )


def _source_roots() -> list[Path]:
    """Where the daemon's packages live: this checkout's root and the SDK's folder (for the
    wire models). PyInstaller does not follow setuptools' editable-install finders."""
    here = Path(__file__).resolve().parents[2]
    return sorted({here, Path(sandman.wire.__file__).resolve().parents[2]})


def _run_pyinstaller(work: Path, entry_module: str) -> Path:
    """Run PyInstaller (onedir) into `work/dist`; return the app folder."""
    entry = work / "sandman_daemon_entry.py"
    entry.write_text(_ENTRY_SCRIPT.format(module=entry_module))
    hook = work / "pyi_rth_sandman_env.py"
    hook.write_text(_RUNTIME_HOOK)
    cmd = [sys.executable, "-m", "PyInstaller", "--noconfirm", "--onedir", "--name", EXECUTABLE]
    cmd += ["--distpath", str(work / "dist"), "--workpath", str(work / "pyi")]
    cmd += ["--specpath", str(work), "--runtime-hook", str(hook)]
    for root in _source_roots():
        cmd += ["--paths", str(root)]
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
    loader = libdir / _loader()
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
        "loader": f"{LIBDIR}/{_loader()}",
        "machine": platform.machine(),
        "glibc": (os.confstr("CS_GNU_LIBC_VERSION") or "").removeprefix("glibc "),
        "python": platform.python_version(),
        "system_libs": added,
        "pod_command": bundle_command(host="0.0.0.0", loader=_loader()),
        "size_bytes": dir_size(app),
    }
    (app / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
    return manifest


def build(
    out: Path, *, work: Path | None = None, entry_module: str = f"{ENTRY_MODULE}.__main__"
) -> dict[str, object]:
    """Build the bundle into `out` and return its manifest.

    `out` is replaced only once the new bundle is complete and its closure verified.
    """
    _require_tools()
    out = out.resolve()
    work = (work or out.parent / f"{out.name}.work").resolve()
    work.mkdir(parents=True, exist_ok=True)
    app = _run_pyinstaller(work, entry_module)
    added = _add_system_libs(app)
    verify_closure(app)
    manifest = _write_manifest(app, added)
    staging = out.parent / f".{out.name}.new"
    shutil.rmtree(staging, ignore_errors=True)
    shutil.move(str(app), staging)
    shutil.rmtree(out, ignore_errors=True)
    staging.rename(out)
    return manifest


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m daemon.sandbox.bundle", description=__doc__)
    sub = parser.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build", help="build the bundle")
    b.add_argument("--out", type=Path, required=True)
    b.add_argument("--work", type=Path, help="PyInstaller work dir (default: <out>.work)")
    c = sub.add_parser("command", help="print the pod argv as JSON")
    c.add_argument("--mount", default=BUNDLE_MOUNT)
    c.add_argument("--port", type=int, default=DAEMON_PORT)
    args = parser.parse_args(argv)
    if args.cmd == "build":
        print(f"bundle: building {args.out} with PyInstaller (about 15-40 s)...", flush=True)
        started = time.monotonic()
        manifest = build(args.out, work=args.work)
        size_mib = int(str(manifest["size_bytes"])) / 2**20
        print(f"bundle: done in {time.monotonic() - started:.1f} s, {size_mib:.1f} MiB")
        print("bundle: pod command:", json.dumps(manifest["pod_command"]))
    else:
        argv = bundle_command(host="0.0.0.0", port=args.port, mount=args.mount, loader=_loader())
        print(json.dumps(argv))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
