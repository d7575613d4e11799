"""A libc-free busybox rootfs, and bubblewrap runs of the daemon bundle inside it.

The promise of the daemon bundle is that it runs as PID 1 of an *unmodified* task image that
may have neither Python nor a libc. The harshest such image is a `busybox-static` rootfs: one
statically linked binary plus applet symlinks, no `/lib` at all. If the bundle serves requests
there, it carries everything it needs. Building that rootfs and starting the bundle in it under
bubblewrap (a few ms, no daemon, no image store) is what the bundle tests and the start-up
benchmark share, so it lives here rather than in the test file.

It starts the bundle with the argv of :mod:`daemon.sandbox.layout`, the one a sandbox Pod
carries, so what passes here is what a kubelet would start.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from daemon.sandbox.bundle import elf_interpreter
from daemon.sandbox.layout import BUNDLE_MOUNT
from devstack.ports import free_listen_port

_APT_HINT = "install the Debian packages bubblewrap and busybox-static (`make system-deps`)"


class RootfsError(RuntimeError):
    """A tool this module needs is missing or unusable; the message says how to fix it."""


def find_busybox_static() -> Path:
    """The host's statically linked busybox; raise with an install hint if there is none."""
    for candidate in ("/bin/busybox", "/usr/bin/busybox"):
        path = Path(candidate)
        if path.is_file() and elf_interpreter(path) is None:
            return path
    raise RootfsError(f"no statically linked busybox found: {_APT_HINT}")


def find_bwrap() -> str:
    """Path of the bubblewrap binary; raise with an install hint if it is missing."""
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        raise RootfsError(f"bubblewrap (bwrap) not found on PATH: {_APT_HINT}")
    return bwrap


def build_busybox_rootfs(dest: Path) -> Path:
    """Create a minimal rootfs in `dest`: busybox + applet symlinks, /tmp, a small /etc.

    There is deliberately no /lib, /lib64 or /usr/lib: nothing dynamically linked can run
    here unless it brings its own loader and libc.
    """
    busybox = find_busybox_static()
    for sub in ("bin", "tmp", "etc", "proc", "dev", "root", BUNDLE_MOUNT.lstrip("/")):
        (dest / sub).mkdir(parents=True, exist_ok=True)
    shutil.copy2(busybox, dest / "bin" / "busybox")
    applets = subprocess.run(
        [str(busybox), "--list"], check=True, capture_output=True, text=True
    ).stdout.split()
    for applet in applets:
        link = dest / "bin" / applet
        if applet != "busybox" and not link.exists():
            link.symlink_to("busybox")
    (dest / "tmp").chmod(0o1777)
    _write_etc(dest / "etc")
    return dest


def _write_etc(etc: Path) -> None:
    (etc / "passwd").write_text("root:x:0:0:root:/root:/bin/sh\n")
    (etc / "group").write_text("root:x:0:\n")
    (etc / "hosts").write_text("127.0.0.1 localhost\n::1 localhost\n")
    (etc / "hostname").write_text("sandbox\n")


def bwrap_argv(
    rootfs: Path, bundle: Path, command: Sequence[str], env: Mapping[str, str]
) -> list[str]:
    """bubblewrap argv running `command` as PID 1 of `rootfs`, the bundle read-only at /sandman.

    The network namespace is shared with the host, so a daemon listening on 127.0.0.1 inside
    is reachable from the test on loopback; the PID namespace is private and the command is
    its PID 1 (`--as-pid-1`), as in a container.
    """
    argv = [find_bwrap(), "--bind", str(rootfs), "/", "--ro-bind", str(bundle), BUNDLE_MOUNT]
    argv += ["--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp"]
    argv += ["--unshare-pid", "--as-pid-1", "--die-with-parent", "--chdir", "/", "--clearenv"]
    for key, value in env.items():
        argv += ["--setenv", key, value]
    return [*argv, "--", *command]


def free_port() -> int:
    """A TCP port on 127.0.0.1 for the daemon to bind (outside the ephemeral range)."""
    return free_listen_port("127.0.0.1")


def healthz_ok(port: int, timeout: float = 0.5) -> bool:
    """True if GET /healthz on 127.0.0.1:port answers 200 (raw socket: cheap to poll)."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
            s.sendall(b"GET /healthz HTTP/1.1\r\nHost: sandbox\r\nConnection: close\r\n\r\n")
            head = s.recv(64)
    except OSError:
        return False
    return head.startswith(b"HTTP/1.1 200") or head.startswith(b"HTTP/1.0 200")


@dataclass
class RootfsDaemon:
    """A bundle daemon running under bubblewrap; `stop()` always leaves nothing behind."""

    proc: subprocess.Popen[bytes]
    port: int
    token: str
    log_path: Path

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def daemon_pid(self) -> int | None:
        """Host PID of the sandbox's PID 1 (the daemon), the child of bwrap's process."""
        children = Path(f"/proc/{self.proc.pid}/task/{self.proc.pid}/children")
        try:
            pids = children.read_text().split()
        except OSError:
            return None
        return int(pids[0]) if pids else None

    def wait_healthy(self, timeout: float = 20.0, poll_s: float = 0.002) -> float:
        """Seconds until /healthz first answered; raise if the sandbox died or timed out."""
        start = time.monotonic()
        while not healthz_ok(self.port):
            if self.proc.poll() is not None:
                raise RootfsError(
                    f"daemon exited with {self.proc.returncode} before healthy:\n{self.log()}"
                )
            if time.monotonic() - start > timeout:
                raise RootfsError(f"daemon not healthy on port {self.port} after {timeout} s")
            time.sleep(poll_s)
        return time.monotonic() - start

    def log(self) -> str:
        """What the daemon (and bwrap) wrote to stdout/stderr so far."""
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def terminate(self, grace_s: float = 5.0) -> int:
        """SIGTERM the daemon (PID 1 inside) and return bwrap's exit status."""
        pid = self.daemon_pid()
        if pid is not None:
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        return self.proc.wait(timeout=grace_s)

    def stop(self) -> None:
        """Kill whatever is still running: bwrap's death SIGKILLs the whole PID namespace."""
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=10)


def start_in_rootfs(
    rootfs: Path,
    bundle: Path,
    command: Sequence[str],
    *,
    port: int,
    token: str,
    log_path: Path,
    extra_env: Mapping[str, str] | None = None,
) -> RootfsDaemon:
    """Start `command` (the pod argv, see `layout.bundle_command`) in `rootfs` under bubblewrap.

    stdout and stderr go to `log_path` (a file, not a pipe: nobody has to drain it, so a
    chatty daemon can never block on a full pipe), so a failed start can be reported.
    """
    env = {"PATH": "/bin", "HOME": "/root", "SANDMAN_TOKEN": token, **(extra_env or {})}
    with log_path.open("ab") as log:
        proc = subprocess.Popen(
            bwrap_argv(rootfs, bundle, command, env),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    return RootfsDaemon(proc=proc, port=port, token=token, log_path=log_path)
