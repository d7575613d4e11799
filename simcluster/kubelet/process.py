"""The ``process`` runtime: each container's command runs as a local process.

The pod IP is a loopback address of its own (127.x.y.z), handed to the command through the
downward API (``fieldRef: status.podIP``) and ``$(VAR)`` expansion, so a server in the pod
binds to it and is reachable at the pod IP like on a real cluster. Processes run under
bubblewrap where it is installed: an allow-list root (``bwrap.py``: the system's software,
a small /etc, the node's binds and the pod's volumes; never /root, /home or the checkout),
a private /tmp, /proc, /dev, PID/IPC/UTS namespaces, every capability dropped but those the
container's securityContext adds, a clean environment, and the command as PID 1 of its PID
namespace. The network namespace is shared, which is what makes loopback pod IPs work; the
user is the host's (root when the cluster runs as root), so this is a development
convenience, not a security boundary (docs/simcluster.md, "What the process runtime
isolates"). Each container runs in its own process group so stop() can SIGTERM, wait the
grace period and SIGKILL the whole tree. Readiness probes are real (``probes.py``): an HTTP
GET (2xx/3xx = ready) or a TCP connect.
Output goes to ``<log_dir>/<namespace>_<pod>_<container>.log``.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from simcluster.kubelet.bwrap import SYSTEM_PATH, args_file, root_args
from simcluster.kubelet.probes import probe_container
from simcluster.kubelet.runtime import Container, RuntimeStartError, Sandbox

__all__ = ["ProcessRuntime", "ProcessSettings"]


@dataclass(frozen=True, slots=True)
class ProcessSettings:
    log_dir: Path
    bubblewrap: bool = True  # use bwrap when it is on PATH
    pod_dir: Path | None = None  # emptyDir volumes live here (default: <log_dir>/../pods)
    #: ``(path in the sandbox, host path)``: what this node's "image" holds beyond the
    #: system's software, bound read-only into every pod before its volumes (devstack binds
    #: the daemon's Python this way, staged outside the checkout).
    binds: tuple[tuple[str, str], ...] = ()


def _bwrap() -> list[str]:
    """bwrap and the flags every pod shares (none when bwrap is not on PATH)."""
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        return []
    namespaces = ["--unshare-pid", "--unshare-ipc", "--unshare-uts", "--die-with-parent"]
    return [bwrap, *root_args(), *namespaces, "--as-pid-1"]


def _capabilities(c: Container) -> list[str]:
    """bwrap's flags for the container's capabilities: every one dropped, whatever the
    securityContext drops (bwrap already sets no_new_privs for every sandbox), then those it
    adds back; adding needs root (bwrap refuses ``--cap-add`` in setuid mode otherwise,
    where the sandbox holds none anyway)."""
    args = ["--cap-drop", "ALL"]
    if os.geteuid() == 0:
        args += [a for cap in c.security.add for a in ("--cap-add", f"CAP_{cap}")]
    return args


class ProcessRuntime:
    name = "process"

    def __init__(self, settings: ProcessSettings) -> None:
        self.settings = settings
        self._base = _bwrap() if settings.bubblewrap else []
        self._pod_dir = settings.pod_dir or settings.log_dir.parent / "pods"
        self._procs: dict[str, list[tuple[str, asyncio.subprocess.Process]]] = {}
        self._closed = False
        self._inherited: tuple[int, ...] = ()
        settings.log_dir.mkdir(parents=True, exist_ok=True)

    def inherit(self, fd: int) -> None:
        """Every pod process started from now on holds ``fd`` open (the cluster's pod-network
        lock, simcluster/network.py): the range stays reserved while any of them lives."""
        self._inherited = (*self._inherited, fd)

    def log_path(self, namespace: str, pod: str, container: str) -> Path:
        return self.settings.log_dir / f"{namespace}_{pod}_{container}.log"

    def read_log(self, namespace: str, pod: str, container: str) -> bytes:
        path = self.log_path(namespace, pod, container)
        try:
            return path.read_bytes()
        except FileNotFoundError:
            return b""

    @property
    def sandboxed(self) -> bool:
        return bool(self._base)

    def _bwrap_args(self, sandbox: Sandbox, c: Container) -> list[str]:
        """What bwrap reads from its ``--args`` file for container ``c`` (bwrap.py), the
        environment aside: the node's binds, the pod's volumes, capabilities, hostname and
        working directory (the command follows ``--args`` on bwrap's own command line: bwrap
        takes no command from the file)."""
        args = list(self._base[1:])
        for target, source in self.settings.binds:
            args += ["--ro-bind", source, target]
        for m in c.mounts:
            source = m.host_path(self._pod_dir, sandbox.uid)
            args += ["--ro-bind" if m.read_only else "--bind", source, m.target]
        args += _capabilities(c)
        args += ["--hostname", sandbox.name]  # a pod's hostname is its name
        args += ["--chdir", c.working_dir or "/"]  # a container starts in its WORKDIR, not ours
        return args

    def process(self, uid: str, container: str) -> asyncio.subprocess.Process | None:
        """The running process of a pod's container (bwrap's, when sandboxed), else None."""
        for name, proc in self._procs.get(uid, []):
            if name == container and proc.returncode is None:
                return proc
        return None

    def environment(self, sandbox: Sandbox, c: Container) -> dict[str, str]:
        """The container's environment: its own variables over a PATH and HOME, nothing of
        the host's (in a sandbox the PATH is the OCI default; unconfined, the host's)."""
        path = SYSTEM_PATH if self._base else os.environ.get("PATH", SYSTEM_PATH)
        env = {"PATH": path, "HOME": "/tmp", **c.env}
        env.setdefault("HOSTNAME", sandbox.name)
        return env

    async def start(self, sandbox: Sandbox) -> None:
        if sandbox.virtual:
            return
        procs: list[tuple[str, asyncio.subprocess.Process]] = []
        self._procs[sandbox.uid] = procs
        for c in sandbox.containers:
            if not c.argv:
                raise RuntimeStartError(
                    "CreateContainerError",
                    f"container {c.name}: process mode needs an explicit command",
                )
            log = self.log_path(sandbox.namespace, sandbox.name, c.name)
            log.unlink(missing_ok=True)  # a new pod of the same name starts a new log
            with log.open("ab") as out:
                try:
                    proc = await self._start_container(sandbox, c, out)
                except OSError as e:
                    raise RuntimeStartError("StartError", f"container {c.name}: {e}") from e
            procs.append((c.name, proc))
            if self._closed or self._procs.get(sandbox.uid) is not procs:
                # Stopped (or the runtime closed) while this pod was starting: what it
                # started must not outlive it.
                await _kill_all(procs)
                raise RuntimeStartError("StartError", f"pod {sandbox.name} stopped while starting")

    async def _start_container(
        self, sandbox: Sandbox, c: Container, out: IO[bytes]
    ) -> asyncio.subprocess.Process:
        env = self.environment(sandbox, c)
        if not self._base:
            if c.mounts:
                raise RuntimeStartError(
                    "CreateContainerError", f"container {c.name}: volumes need bubblewrap (bwrap)"
                )
            return await _spawn(list(c.argv), out, env, c.working_dir or "/", self._inherited)
        fd = args_file(self._bwrap_args(sandbox, c), env)
        try:
            argv = [self._base[0], "--args", str(fd), "--", *c.argv]
            bare = {"PATH": SYSTEM_PATH}  # bwrap's own environment: nothing of the pod's
            return await _spawn(argv, out, bare, None, (*self._inherited, fd))
        finally:
            os.close(fd)

    async def probe(self, sandbox: Sandbox, container: Container) -> bool:
        return await probe_container(sandbox, container)

    def exited(self, sandbox: Sandbox) -> tuple[str, int] | None:
        for name, proc in self._procs.get(sandbox.uid, []):
            if proc.returncode is not None:
                return name, proc.returncode
        return None

    async def stop(self, sandbox: Sandbox, grace_s: float) -> None:
        procs = self._procs.pop(sandbox.uid, [])
        shutil.rmtree(self._pod_dir / sandbox.uid, ignore_errors=True)
        for _, proc in procs:
            _signal(proc, signal.SIGTERM)
        for _, proc in procs:
            try:
                async with asyncio.timeout(max(grace_s, 0.1)):
                    await proc.wait()
            except TimeoutError:
                _signal(proc, signal.SIGKILL)
                await proc.wait()

    async def close(self) -> None:
        self._closed = True
        for uid in list(self._procs):
            await _kill_all(self._procs.pop(uid))


async def _spawn(
    argv: list[str],
    out: IO[bytes],
    env: dict[str, str],
    workdir: str | None,
    inherited: tuple[int, ...] = (),
) -> asyncio.subprocess.Process:
    """Start one container's process in a session of its own. A start cancelled by a shutdown
    (the kubelet's task) still waits for the fork and kills what it forked: a process nobody
    holds a handle to would outlive its cluster and answer on a pod address the next cluster
    on this machine hands out again."""
    spawn = asyncio.ensure_future(
        asyncio.create_subprocess_exec(
            *argv,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=out,
            stderr=asyncio.subprocess.STDOUT,
            env=env,
            cwd=workdir,
            start_new_session=True,
            pass_fds=inherited,
        )
    )
    try:
        return await asyncio.shield(spawn)
    except asyncio.CancelledError:
        with contextlib.suppress(OSError):
            await _kill_all([("", await spawn)])
        raise


async def _kill_all(procs: list[tuple[str, asyncio.subprocess.Process]]) -> None:
    for _, proc in procs:
        _signal(proc, signal.SIGKILL)
    for _, proc in procs:
        await proc.wait()


def _signal(proc: asyncio.subprocess.Process, sig: int) -> None:
    if proc.returncode is not None:
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, sig)
