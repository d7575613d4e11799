"""The readiness probe both runtimes that run something share (simcluster/kubelet/probes.py):
an HTTP GET is ready on 2xx/3xx, a TCP probe on a connect, a sandbox that runs nothing and a
container without a probe port are always ready, and a server that never answers is not
ready once the probe's timeout passes. The ``process`` and the ``cri`` runtime answer alike
for every case (the ``cri`` runtime needs no containerd for a probe)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from simcluster.kubelet.cri_runtime import CriRuntime, CriRuntimeSettings
from simcluster.kubelet.probes import probe_container
from simcluster.kubelet.process import ProcessRuntime, ProcessSettings
from simcluster.kubelet.runtime import Container, Probe, Sandbox

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(30)]

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


@asynccontextmanager
async def serving(handler: Handler) -> AsyncIterator[int]:
    server = await asyncio.start_server(handler, "127.0.0.1", 0)
    try:
        yield server.sockets[0].getsockname()[1]
    finally:
        server.close()
        await server.wait_closed()


def answering(status: int) -> Handler:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(f"HTTP/1.1 {status} X\r\nContent-Length: 0\r\n\r\n".encode())
        await writer.drain()
        writer.close()

    return handle


async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    await reader.read()  # reads until the prober gives up and closes
    writer.close()


def pod(port: int, path: str | None = "/healthz", *, virtual: bool = False) -> Sandbox:
    probe = Probe(http_path=path, port=port, timeout_s=0.3)
    container = Container(name="c", image="i", readiness=probe)
    return Sandbox("uid", "ns", "p", "127.0.0.1", (container,), virtual=virtual)


async def answers(sandbox: Sandbox, tmp_path: Path) -> list[bool]:
    """The shared probe's answer, then each runtime's: they must not differ."""
    container = sandbox.containers[0]
    process = ProcessRuntime(ProcessSettings(log_dir=tmp_path / "process", bubblewrap=False))
    cri = CriRuntime(CriRuntimeSettings(socket=str(tmp_path / "none.sock"), log_dir=tmp_path))
    try:
        return [
            await probe_container(sandbox, container),
            await process.probe(sandbox, container),
            await cri.probe(sandbox, container),
        ]
    finally:
        await process.close()
        await cri.close()


STATUSES = [(200, True), (302, True), (404, False), (503, False)]


@pytest.mark.parametrize(("status", "ready"), STATUSES)
async def test_an_http_probe_is_ready_on_2xx_and_3xx(
    status: int, ready: bool, tmp_path: Path
) -> None:
    async with serving(answering(status)) as port:
        assert await answers(pod(port), tmp_path) == [ready] * 3


async def test_a_tcp_probe_is_ready_when_it_connects(tmp_path: Path) -> None:
    async with serving(silent) as port:
        assert await answers(pod(port, path=None), tmp_path) == [True] * 3
    assert await answers(pod(port, path=None), tmp_path) == [False] * 3  # closed: refused


async def test_a_server_that_never_answers_is_not_ready_after_the_timeout(tmp_path: Path) -> None:
    async with serving(silent) as port:
        started = asyncio.get_running_loop().time()
        assert await answers(pod(port), tmp_path) == [False] * 3
        assert asyncio.get_running_loop().time() - started < 3 * 0.3 + 2.0


async def test_nothing_to_probe_is_ready(tmp_path: Path) -> None:
    nobody = 1  # no server listens on port 1: a probe that connected would fail
    assert await answers(pod(nobody, virtual=True), tmp_path) == [True] * 3
    assert await answers(pod(0), tmp_path) == [True] * 3
    bare = Sandbox("uid", "ns", "p", "127.0.0.1", (Container(name="c", image="i"),))
    assert await answers(bare, tmp_path) == [True] * 3
