"""Where the daemon listens, how its bundle is laid out, and the argv that starts it.

One definition for every side that must agree on them: the bundle builder
(:mod:`daemon.sandbox.bundle`) lays the files out this way and writes this argv into the
bundle's manifest; the facade's pod renderer (:mod:`facade.podspec`) puts the same argv, port
and probe into every sandbox Pod; the daemon's settings default to the same port; the local
rootfs runs (``devstack.rootfs``) start the bundle exactly as a kubelet would. When these
drifted apart (they were written in five places) a bundle could build fine and still never
answer its readiness probe.

The start command needs no shell, no PATH lookup and no environment variable of the image:
the bundled dynamic loader runs the PyInstaller bootloader with the bundle's own libraries,
so it works in a rootfs without ``/bin/sh`` or a libc (docs/daemon-bundle.md).
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:  # the daemon imports this module before it binds (daemon/sandbox/early.py):
    from collections.abc import Sequence  # annotations only, so no import cost at start

__all__ = [
    "BUNDLE_MOUNT",
    "DAEMON_HOST",
    "DAEMON_PORT",
    "ENTRY_MODULE",
    "EXECUTABLE",
    "LIBDIR",
    "LOADERS",
    "MANIFEST",
    "UnknownMachine",
    "bundle_command",
    "loader_name",
    "python_command",
]

DAEMON_PORT = 8790
"""The daemon's TCP port in every sandbox: container port, readiness probe, facade proxy."""

DAEMON_HOST = "0.0.0.0"
"""The address the daemon listens on by default: every interface of the pod."""

BUNDLE_MOUNT = "/sandman"
"""Where a sandbox container sees the bundle (a read-only volume)."""

EXECUTABLE = "sandman-daemon"
"""The PyInstaller bootloader at the bundle's top level."""

LIBDIR = "_internal"
"""PyInstaller's contents directory: libpython, extension modules, and our loader and libc."""

MANIFEST = "bundle.json"
"""The bundle's manifest: argv, loader, glibc and Python versions."""

ENTRY_MODULE = "daemon.sandbox"
"""``python -m`` target of the daemon, for runs from a Python installation."""

# The loader's file name per architecture (the ELF PT_INTERP basename); the bootloader's
# "started through ld.so" detection relies on the `ld-*.so.*` pattern, so keep the names.
LOADERS = {"x86_64": "ld-linux-x86-64.so.2", "aarch64": "ld-linux-aarch64.so.1"}


class UnknownMachine(ValueError):
    """No glibc loader name is known for this machine architecture."""


def token_digest(token: str) -> bytes:
    """The verifier of a bearer token: its SHA-256 (of the stripped token). A pod carries
    this, hex-encoded in ``SANDMAN_TOKEN_SHA256`` (facade/podspec.py), never the token; the
    daemon compares the digest of what a caller presents with it (daemon/sandbox/claim.py)."""
    import hashlib  # here: this module is imported before the daemon binds its port

    return hashlib.sha256(token.strip().encode()).digest()


def loader_name(machine: str | None = None) -> str:
    """The dynamic loader's file name for `machine` (default: this host)."""
    import platform  # here, not at the top: ~10 ms the daemon would pay before it binds

    machine = machine or platform.machine()
    try:
        return LOADERS[machine]
    except KeyError:
        raise UnknownMachine(f"no glibc loader name known for machine {machine!r}") from None


def bundle_command(
    *, host: str, port: int = DAEMON_PORT, mount: str = BUNDLE_MOUNT, loader: str | None = None
) -> list[str]:
    """The container ``command`` that starts the daemon from a bundle mounted at `mount`.

    `loader` is the loader's file name for the *node's* architecture (default: this host's);
    the token's verifier comes from the ``SANDMAN_TOKEN_SHA256`` environment variable of the
    container (the token itself never reaches the pod).
    """
    lib = f"{mount}/{LIBDIR}"
    return [f"{lib}/{loader or loader_name()}", "--library-path", lib, f"{mount}/{EXECUTABLE}",
            "--host", host, "--port", str(port)]  # fmt: skip


def python_command(python: Sequence[str], *, host: str, port: int = DAEMON_PORT) -> list[str]:
    """The same daemon started from a Python installation (simcluster's process runtime)."""
    return [*python, "-m", ENTRY_MODULE, "--host", host, "--port", str(port)]
