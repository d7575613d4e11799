"""Readiness probes of the runtimes that run something: one check, as the kubelet's prober.

Why a module of its own: the ``process`` and the ``cri`` runtimes both put the pod on a
loopback pod IP of its own and so probe it the same way — an HTTP GET (2xx/3xx = ready) or a
TCP connect to the pod IP, a sandbox that runs nothing (another tenant's pod) and a container
without a probe port always ready. One definition keeps the two runtimes' readiness equal;
the ``virtual`` runtime (nothing runs) keeps its own "always ready".
"""

from __future__ import annotations

import asyncio
import contextlib

from simcluster.kubelet.runtime import Container, Sandbox

__all__ = ["probe_container", "probe_once"]


async def probe_container(sandbox: Sandbox, container: Container) -> bool:
    """``Runtime.probe`` of a runtime whose pods listen on their pod IP."""
    if sandbox.virtual:
        return True
    p = container.readiness
    if p is None or not p.port:
        return True
    return await probe_once(sandbox.ip, p.port, p.http_path, p.timeout_s)


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
