"""The bubblewrap command line of one ``process``-runtime container: what it may see.

Why an allow-list: the process runtime is the embedded default (``sandman-dev up``,
``make demo``), so the code an agent runs in a sandbox runs on the developer's own machine.
Binding the host's whole filesystem read-only (as this runtime once did) showed every
sandbox ``/root``, ``/home`` (``~/.ssh``, cloud credentials), the checkout and all of
``/etc``. A sandbox now sees only what a task needs to run the host's programs:

- the system's software, read-only: ``/usr`` and the top-level ``/bin``, ``/sbin``,
  ``/lib*`` (symlinks into ``/usr`` on merged-/usr systems, kept as symlinks);
- a small ``/etc``: name resolution, TLS roots, users and groups, the dynamic linker's
  cache, ``alternatives`` (many ``/usr/bin`` names are links through it) and a few files
  shells read (``ETC_FILES``) — never ``shadow``, ``ssh``, ``sudoers`` or anything else;
- the node's binds (``ProcessSettings.binds``: e.g. the daemon's Python, staged outside the
  checkout by devstack), read-only, then the pod's volumes;
- a private ``/tmp``, a fresh ``/proc`` of the pod's own PID namespace, a minimal ``/dev``.

Nothing else of the host exists in the sandbox: not ``/root``, ``/home``, ``/work``,
``/opt``, ``/var`` (but an empty ``/var/tmp``) nor ``/run``.

Why the arguments go through a file descriptor (``--args``): bubblewrap's own command line
and environment are readable in ``/proc``. Every flag, the container's environment
included (``--clearenv`` then one ``--setenv`` per variable), is written to an anonymous
file whose descriptor bwrap reads (and closes before the command runs); only the command
follows on bwrap's command line, and bwrap itself runs with a bare ``PATH``. With
``--as-pid-1`` the container's command is PID 1 of the pod's PID namespace (no bwrap
reaper in it), as a container's entrypoint is on a real node: the daemon's own scrubbing of
its environment block (daemon/sandbox/supervisor.py) then leaves no process in the sandbox
whose ``/proc/<pid>/environ`` or ``cmdline`` holds the token or its verifier.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence

__all__ = ["ETC_FILES", "SYSTEM_DIRS", "SYSTEM_PATH", "args_file", "root_args"]

#: Top-level host directories bound read-only (or re-created as the symlinks they are).
SYSTEM_DIRS = ("usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32")

#: What of ``/etc`` a sandbox sees (those that exist on the host), read-only.
ETC_FILES = (
    # name resolution
    "resolv.conf", "hosts", "host.conf", "nsswitch.conf", "gai.conf", "services", "protocols",
    "networks",
    # users and groups (names only: never shadow or gshadow)
    "passwd", "group",
    # TLS roots
    "ssl", "ca-certificates", "ca-certificates.conf", "pki",
    # the dynamic linker, command links, locale and time
    "ld.so.cache", "ld.so.conf", "ld.so.conf.d", "alternatives", "localtime", "timezone",
    "locale.alias", "mime.types", "magic", "magic.mime",
    # what shells and tools read at start
    "bash.bashrc", "profile", "inputrc", "shells", "environment", "os-release",
    "debian_version", "login.defs",
)  # fmt: skip

#: The container's PATH when the pod sets none: the OCI runtimes' default.
SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def root_args(root: str = "/") -> list[str]:
    """bwrap's flags for the allow-list root (module docstring), from the host's ``root``."""
    args: list[str] = []
    for entry in SYSTEM_DIRS:
        path = os.path.join(root, entry)
        if os.path.islink(path):
            args += ["--symlink", os.readlink(path), f"/{entry}"]
        elif os.path.isdir(path):
            args += ["--ro-bind", path, f"/{entry}"]
    args += ["--dir", "/etc"]
    for entry in ETC_FILES:
        path = os.path.join(root, "etc", entry)
        if os.path.exists(path):  # a symlink (e.g. resolv.conf into /run) binds its target
            args += ["--ro-bind", path, f"/etc/{entry}"]
    args += ["--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp", "--dir", "/var/tmp"]
    return args


def args_file(args: Sequence[str], env: Mapping[str, str]) -> int:
    """An anonymous file holding ``args`` and the environment as bwrap's ``--args`` reads
    them (NUL-separated), positioned at its start; the caller passes it and closes it."""
    flags = ["--clearenv"]
    for key, value in env.items():
        flags += ["--setenv", key, value]
    fd = os.memfd_create("bwrap-args", os.MFD_CLOEXEC)
    try:
        data = memoryview(b"".join(os.fsencode(a) + b"\0" for a in [*flags, *args]))
        while data:
            data = data[os.write(fd, data) :]
        os.lseek(fd, 0, os.SEEK_SET)
    except OSError:
        os.close(fd)
        raise
    return fd
