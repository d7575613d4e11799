"""The ``process`` runtime: each container's command runs as a local process.

The pod IP is a loopback address of its own (127.x.y.z), handed to the command through the
downward API (``fieldRef: status.podIP``) and ``$(VAR)`` expansion, so a server in the pod
binds to it and is reachable at the pod IP like on a real cluster. Processes run under
bubblewrap where it is installed (read-only root, private /tmp, /proc, /dev, PID/IPC/UTS
namespaces; the network namespace is shared, which is what makes loopback pod IPs work), and
in their own process group so stop() can SIGTERM, wait the grace period and SIGKILL the
whole tree. Readiness probes are real (``probes.py``): an HTTP GET (2xx/3xx = ready) or a
TCP connect.
Output goes to ``<log_dir>/<namespace>_<pod>_<container>.log``.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from simcluster.kubelet.probes import probe_container
from simcluster.kubelet.runtime import Container, RuntimeStartError, Sandbox

__all__ = ["ProcessRuntime", "ProcessSettings"]


@dataclass(frozen=True, slots=True)
class ProcessSettings:
    log_dir: Path
    bubblewrap: bool = True  # use bwrap when it is on PATH
    pod_dir: Path | None = None  # emptyDir volumes live here (default: <log_dir>/../pods)


def _bwrap_base() -> list[str]:
    """bwrap over a tmpfs root holding the host's top-level directories read-only (so
    volume mount points at new top-level paths, e.g. /sandman, can be created)."""
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        return []
    args = [bwrap]
    for entry in sorted(os.listdir("/")):
        path = f"/{entry}"
        if entry in ("proc", "dev", "tmp"):
            continue
        if os.path.islink(path):
            args += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            args += ["--ro-bind", path, path]
    namespaces = ["--unshare-pid", "--unshare-ipc", "--unshare-uts", "--die-with-parent"]
    return [*args, "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp", *namespaces]


def _host_tmp_paths(argv0: Sequence[str]) -> list[str]:
    """Host paths under /tmp the pod's program needs (this Python's prefix and import path,
    the command itself): /tmp is private in the sandbox, so a checkout or virtualenv living
    under /tmp (as CI clones may) is bound back in, read-only."""
    candidates = {sys.prefix, *sys.path, *(os.path.dirname(a) for a in argv0 if a.startswith("/"))}
    wanted = sorted(p for p in candidates if p.startswith("/tmp/") and os.path.isdir(p))
    out: list[str] = []
    for p in wanted:
        if not any(p == q or p.startswith(q + "/") for q in out):
            out.append(p)
    return out


def _capabilities(c: Container) -> list[str]:
    """bwrap's flags for the container's capabilities: a drop of ``ALL`` drops every one
    (bwrap already sets no_new_privs for every sandbox); adding needs root (bwrap refuses
    ``--cap-add`` in setuid mode otherwise, where the sandbox holds none anyway)."""
    s = c.security
    args = [a for cap in s.drop for a in ("--cap-drop", cap if cap == "ALL" else f"CAP_{cap}")]
    if os.geteuid() == 0:
        args += [a for cap in s.add for a in ("--cap-add", f"CAP_{cap}")]
    return args


class ProcessRuntime:
    name = "process"

    def __init__(self, settings: ProcessSettings) -> None:
        self.settings = settings
        self._base = _bwrap_base() if settings.bubblewrap else []
        self._pod_dir = settings.pod_dir or settings.log_dir.parent / "pods"
        self._procs: dict[str, list[tuple[str, asyncio.subprocess.Process]]] = {}
        self._closed = False
        self._inherited: tuple[int, ...] = ()
        settings.log_dir.mkdir(parents=True, exist_ok=True)

    def inherit(self, fd: int) -> None:
        """Every pod process started from now on holds ``fd`` open (the cluster's pod-network
        lock, simcluster/network.py): the range stays reserved while any of them lives."""
        self._inherited = (*self._inherited, fd)

    def read_log(self, namespace: str, pod: str, container: str) -> bytes:
        path = self.settings.log_dir / f"{namespace}_{pod}_{container}.log"
        try:
            return path.read_bytes()
        except FileNotFoundError:
            return b""

    @property
    def sandboxed(self) -> bool:
        return bool(self._base)

    def _argv(self, sandbox: Sandbox, c: Container) -> list[str]:
        if not self._base:
            if c.mounts:
                raise RuntimeStartError(
                    "CreateContainerError", f"container {c.name}: volumes need bubblewrap (bwrap)"
                )
            return list(c.argv)
        args = list(self._base)
        for path in _host_tmp_paths(c.argv[:1]):
            args += ["--ro-bind", path, path]
        for m in c.mounts:
            source = m.host_path(self._pod_dir, sandbox.uid)
            args += ["--ro-bind" if m.read_only else "--bind", source, m.target]
        args += _capabilities(c)
        args += ["--hostname", sandbox.name]  # a pod's hostname is its name
        args += ["--chdir", c.working_dir or "/"]  # a container starts in its WORKDIR, not ours
        return [*args, "--", *c.argv]

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
            log = self.settings.log_dir / f"{sandbox.namespace}_{sandbox.name}_{c.name}.log"
            log.unlink(missing_ok=True)  # a new pod of the same name starts a new log
            env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": "/tmp", **c.env}
            env.setdefault("HOSTNAME", sandbox.name)
            with log.open("ab") as out:
                try:
                    proc = await _spawn(
                        self._argv(sandbox, c), out, env, c.working_dir, self._base, self._inherited
                    )
                except OSError as e:
                    raise RuntimeStartError("StartError", f"container {c.name}: {e}") from e
            procs.append((c.name, proc))
            if self._closed or self._procs.get(sandbox.uid) is not procs:
                # Stopped (or the runtime closed) while this pod was starting: what it
                # started must not outlive it.
                await _kill_all(procs)
                raise RuntimeStartError("StartError", f"pod {sandbox.name} stopped while starting")

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
                await asyncio.wait_for(proc.wait(), timeout=max(grace_s, 0.1))
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
    base: list[str],
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
            cwd=workdir or "/" if not base else None,
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
