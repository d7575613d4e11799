"""The ``process`` runtime: each container's command runs as a local process.

The pod IP is a loopback address of its own (127.x.y.z), handed to the command through the
downward API (``fieldRef: status.podIP``) and ``$(VAR)`` expansion, so a server in the pod
binds to it and is reachable at the pod IP like on a real cluster. Processes run under
bubblewrap where it is installed (read-only root, private /tmp, /proc, /dev, PID/IPC/UTS
namespaces; the network namespace is shared, which is what makes loopback pod IPs work), and
in their own process group so stop() can SIGTERM, wait the grace period and SIGKILL the
whole tree. Readiness probes are real: an HTTP GET (2xx/3xx = ready) or a TCP connect.
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

from simcluster.kubelet.runtime import Container, RuntimeStartError, Sandbox

__all__ = ["ProcessRuntime", "ProcessSettings", "probe_once"]


@dataclass(frozen=True, slots=True)
class ProcessSettings:
    log_dir: Path
    bubblewrap: bool = True  # use bwrap when it is on PATH


def _bwrap_prefix() -> list[str]:
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        return []
    return [
        bwrap,
        "--ro-bind",
        "/",
        "/",
        "--dev",
        "/dev",
        "--proc",
        "/proc",
        "--tmpfs",
        "/tmp",
        "--unshare-pid",
        "--unshare-ipc",
        "--unshare-uts",
        "--die-with-parent",
        "--",
    ]


async def probe_once(ip: str, port: int, path: str | None, timeout_s: float) -> bool:
    """One readiness check like the kubelet's prober: HTTP GET or TCP connect."""
    writer = None
    try:
        async with asyncio.timeout(timeout_s):
            reader, writer = await asyncio.open_connection(ip, port)
            if path is None:
                return True
            request = (
                f"GET {path} HTTP/1.1\r\nHost: {ip}:{port}\r\n"
                "User-Agent: kube-probe/1.32\r\nConnection: close\r\n\r\n"
            )
            writer.write(request.encode())
            await writer.drain()
            status = (await reader.readline()).split()
            return len(status) >= 2 and 200 <= int(status[1]) < 400
    except (OSError, TimeoutError, ValueError):
        return False
    finally:
        if writer is not None:
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()


class ProcessRuntime:
    name = "process"

    def __init__(self, settings: ProcessSettings) -> None:
        self.settings = settings
        self._prefix = _bwrap_prefix() if settings.bubblewrap else []
        self._procs: dict[str, list[tuple[str, asyncio.subprocess.Process]]] = {}
        settings.log_dir.mkdir(parents=True, exist_ok=True)

    @property
    def sandboxed(self) -> bool:
        return bool(self._prefix)

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
            env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": "/tmp", **c.env}
            env.setdefault("HOSTNAME", sandbox.name)
            with log.open("ab") as out:
                try:
                    proc = await asyncio.create_subprocess_exec(
                        *self._prefix,
                        *c.argv,
                        stdin=asyncio.subprocess.DEVNULL,
                        stdout=out,
                        stderr=asyncio.subprocess.STDOUT,
                        env=env,
                        start_new_session=True,
                    )
                except OSError as e:
                    raise RuntimeStartError("StartError", f"container {c.name}: {e}") from e
            procs.append((c.name, proc))

    async def probe(self, sandbox: Sandbox, container: Container) -> bool:
        if sandbox.virtual:
            return True
        p = container.readiness
        if p is None or not p.port:
            return True
        return await probe_once(sandbox.ip, p.port, p.http_path, p.timeout_s)

    def exited(self, sandbox: Sandbox) -> tuple[str, int] | None:
        for name, proc in self._procs.get(sandbox.uid, []):
            if proc.returncode is not None:
                return name, proc.returncode
        return None

    async def stop(self, sandbox: Sandbox, grace_s: float) -> None:
        procs = self._procs.pop(sandbox.uid, [])
        for _, proc in procs:
            _signal(proc, signal.SIGTERM)
        for _, proc in procs:
            try:
                await asyncio.wait_for(proc.wait(), timeout=max(grace_s, 0.1))
            except TimeoutError:
                _signal(proc, signal.SIGKILL)
                await proc.wait()

    async def close(self) -> None:
        for uid in list(self._procs):
            procs = self._procs.pop(uid)
            for _, proc in procs:
                _signal(proc, signal.SIGKILL)
            for _, proc in procs:
                await proc.wait()


def _signal(proc: asyncio.subprocess.Process, sig: int) -> None:
    if proc.returncode is not None:
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, sig)
