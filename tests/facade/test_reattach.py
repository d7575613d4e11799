"""The SDK's execs survive a broken connection on either hop, through the facade's proxy.

Trainer SDK -> [cut here] -> facade proxy -> [or here] -> sandbox daemon, each link a
loopback TCP proxy the test cuts mid-exec. The SDK re-sends the exec under its id, the
facade forwards it (body, id and ``resume_from`` unchanged) and the daemon re-attaches: the
command ran once (it appends a line to a file) and the caller gets its one result, or its
whole stream with nothing repeated or missing.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from daemon.sandbox.settings import DaemonSettings
from facade.app import FacadeSettings
from facade.errors import FacadeError, error_response
from facade.proxy import DaemonProxy, ProxyLimits
from sandman import Conflict, Limits, RetryPolicy
from sandman.sdk.sandbox import AsyncSandbox
from sandman.sdk.settings import Timeouts
from sandman.sdk.transport import Transport
from sandman.wire import keepalive
from sandman.wire.facade import Sandbox as SandboxView
from tests.support.daemon import DaemonProcess, start_daemon
from tests.support.netproxy import FreezableProxy
from tests.support.wait import wait_until_async

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]
FAST = RetryPolicy(attempts=5, initial_s=0.05, max_backoff_s=0.2)
VIEW = SandboxView(id="sb-1", owner="o", sandbox_class="tiny", image="img", state="ready")


@dataclass
class Links:
    front: FreezableProxy  # trainer -> facade
    back: FreezableProxy  # facade -> daemon
    sandbox: AsyncSandbox


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[DaemonProcess]:
    process = start_daemon(cwd=str(tmp_path))
    yield process
    assert process.stop() == 0


@pytest.fixture
async def links(daemon: DaemonProcess) -> AsyncIterator[Links]:
    port = int(daemon.url.rsplit(":", 1)[1])
    back = await FreezableProxy("127.0.0.1", port).start()
    proxy = DaemonProxy(port=back.port)
    await proxy.start()

    async def forward(request: web.Request) -> web.StreamResponse:
        try:
            path = "/v1/" + request.match_info["path"]
            return await proxy.forward(request, "127.0.0.1", daemon.token, path)
        except FacadeError as exc:
            return error_response(exc)

    app = web.Application()
    app.router.add_route("*", "/v1/sandboxes/{id}/{path:.*}", forward)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    front = await FreezableProxy("127.0.0.1", server.port or 0).start()
    transport = Transport(
        f"http://127.0.0.1:{front.port}", "t", timeouts=Timeouts(), limits=Limits(), retry=FAST
    )
    try:
        yield Links(front, back, AsyncSandbox(transport, VIEW))
    finally:
        await transport.close()
        await front.stop()
        await server.close()
        await proxy.close()
        await back.stop()


def _lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


@pytest.mark.parametrize("hop", ["front", "back"])
async def test_an_exec_cut_mid_run_runs_once_and_returns_its_result(
    links: Links, tmp_path: Path, hop: str
) -> None:
    log = tmp_path / "ran.log"
    call = asyncio.ensure_future(
        links.sandbox.exec(f"echo ran >> {log}; sleep 1; echo finished", timeout_s=30)
    )
    await wait_until_async(lambda: _lines(log) == ["ran"])
    link = links.front if hop == "front" else links.back
    link.cut()
    result = await call
    assert (result.exit_code, result.stdout) == (0, "finished\n")
    assert _lines(log) == ["ran"]
    assert link.cuts == 1


async def test_a_stream_cut_mid_run_resumes_with_nothing_repeated_or_missing(
    links: Links, tmp_path: Path
) -> None:
    log = tmp_path / "ran.log"
    script = f"echo ran >> {log}; for i in $(seq 1 50); do echo $i; sleep 0.02; done"
    kinds: list[str] = []
    text = []
    async for event in links.sandbox.exec_stream(script, timeout_s=30):
        kinds.append(event.kind)
        text.append(event.text if event.kind == "stdout" else "")
        if len(kinds) == 8:
            links.front.cut()
    assert kinds[0] == "start" and kinds.count("start") == 1 and kinds[-1] == "exit"
    assert "".join(text) == "".join(f"{i}\n" for i in range(1, 51))
    assert _lines(log) == ["ran"]


async def test_leaving_a_stream_early_stops_its_command(
    links: Links, daemon: DaemonProcess
) -> None:
    async for event in links.sandbox.exec_stream("sleep 30", timeout_s=60):
        assert event.kind == "start"
        break

    async def stopped() -> bool:
        return (await links.sandbox.info()).running_execs == 0

    await wait_until_async(stopped, timeout_s=5)  # far below the daemon's re-attach grace


async def test_a_refused_stream_leaves_the_exec_under_its_id_alone(links: Links) -> None:
    running = asyncio.ensure_future(links.sandbox.exec("sleep 1; echo mine", exec_id="taken"))

    async def started() -> bool:
        return (await links.sandbox.info()).running_execs == 1

    await wait_until_async(started)
    with pytest.raises(Conflict) as refused:
        async for _ in links.sandbox.exec_stream("echo other", exec_id="taken"):
            pass
    assert refused.value.reason == "exec_id_reused"
    result = await running
    assert (result.exit_code, result.stdout) == (0, "mine\n")


async def test_every_hop_closes_idle_connections_client_side_first() -> None:
    """A pooled connection the server closes at the moment a client reuses it loses the
    request: on each hop the client's idle time is the shorter (sandman.wire.keepalive)."""
    sdk_pool, facade_server = Limits().keepalive_s, FacadeSettings().keepalive_s
    facade_pool, daemon_server = ProxyLimits().keepalive_s, DaemonSettings("-").keepalive_timeout_s
    assert sdk_pool < facade_server
    assert facade_pool < daemon_server
    assert (sdk_pool, facade_server, daemon_server) == (
        keepalive.POOLED_IDLE_S,
        keepalive.FACADE_IDLE_S,
        keepalive.DAEMON_IDLE_S,
    )
    assert facade_pool == keepalive.POOLED_IDLE_S
