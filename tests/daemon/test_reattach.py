"""Tool calls that survive a broken connection: an exec's id re-attaches, never runs twice.

Each test cuts the link (a loopback TCP proxy closing both ends) while a command runs, then
sends the same request again: the command must have run exactly once (it appends a line to
a file) and the retry gets its one result, or, for a stream, the events after those already
received, with nothing duplicated or missing.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import msgspec
import pytest

from sandman.sdk.daemon_client import DaemonAPIError, SandboxClient
from sandman.wire.daemon import ExecEvent, ExecRequest
from tests.support.daemon import DaemonProcess
from tests.support.netproxy import FreezableProxy
from tests.support.wait import wait_until, wait_until_async

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]


@pytest.fixture
async def proxy(daemon: DaemonProcess) -> AsyncIterator[FreezableProxy]:
    host, port = daemon.url.removeprefix("http://").rsplit(":", 1)
    link = await FreezableProxy(host, int(port)).start()
    try:
        yield link
    finally:
        await link.stop()


@pytest.fixture
async def linked(daemon: DaemonProcess, proxy: FreezableProxy) -> AsyncIterator[SandboxClient]:
    async with SandboxClient(f"http://127.0.0.1:{proxy.port}", daemon.token) as c:
        yield c


def _lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


async def test_a_cut_exec_runs_once_and_the_retry_gets_its_result(
    linked: SandboxClient, proxy: FreezableProxy, tmp_path: Path
) -> None:
    log = tmp_path / "ran.log"
    request = ExecRequest(
        command=f"echo ran >> {log}; sleep 1; echo finished", id="append-once", timeout_s=30
    )
    first = asyncio.ensure_future(linked.exec(request))
    await wait_until_async(lambda: _lines(log) == ["ran"])
    proxy.cut()
    with pytest.raises(aiohttp.ClientError):
        await first
    retried = await linked.exec(request)
    assert (retried.exit_code, retried.stdout.data) == (0, "finished\n")
    again = await linked.exec(request)  # after the end too: the same result, not a new run
    assert again == retried
    assert _lines(log) == ["ran"]


async def test_a_different_request_under_a_used_id_is_a_409(client: SandboxClient) -> None:
    await client.exec(argv=["true"], id="one-call")
    with pytest.raises(DaemonAPIError) as caught:
        await client.exec(argv=["false"], id="one-call")
    assert (caught.value.status, caught.value.reason) == (409, "exec_id_reused")
    with pytest.raises(DaemonAPIError) as streamed:  # a stream is another call too
        async for _ in client.exec_stream(argv=["true"], id="one-call"):
            pass
    assert (streamed.value.status, streamed.value.reason) == (409, "exec_id_reused")


async def _events(
    daemon: DaemonProcess, port: int, request: ExecRequest, resume_from: int = 0
) -> AsyncIterator[ExecEvent]:
    """The raw NDJSON stream (the client under test is the SDK; this is the wire)."""
    url = f"http://127.0.0.1:{port}/v1/exec/stream?resume_from={resume_from}"
    headers = {"Authorization": f"Bearer {daemon.token}"}
    body = msgspec.json.encode(request)
    async with (
        aiohttp.ClientSession() as session,
        session.post(url, data=body, headers=headers) as r,
    ):
        assert r.status == 200, await r.text()
        async for line in r.content:
            yield msgspec.json.decode(line, type=ExecEvent)


async def test_a_cut_stream_resumes_with_nothing_duplicated_or_missing(
    daemon: DaemonProcess, proxy: FreezableProxy, tmp_path: Path
) -> None:
    log = tmp_path / "ran.log"
    script = f"echo ran >> {log}; for i in $(seq 1 60); do echo $i; sleep 0.02; done"
    request = ExecRequest(command=script, id="stream-once", timeout_s=30)
    received: list[ExecEvent] = []

    async def read_until_cut() -> None:
        async for event in _events(daemon, proxy.port, request):
            received.append(event)
            if len(received) == 6:
                proxy.cut()

    with pytest.raises(aiohttp.ClientError):
        await read_until_cut()
    assert received[0].event == "start"
    outputs = [e for e in received if e.event in ("stdout", "stderr")]
    rest = [e async for e in _events(daemon, proxy.port, request, len(outputs))]
    assert rest[0] == ExecEvent(event="start", id="stream-once")
    assert rest[-1].event == "exit" and rest[-1].result is not None
    assert rest[-1].result.exit_code == 0
    text = "".join(e.data or "" for e in [*outputs, *rest] if e.event == "stdout")
    assert text == "".join(f"{i}\n" for i in range(1, 61))
    assert _lines(log) == ["ran"]


async def test_a_resume_past_the_output_is_a_400(
    daemon: DaemonProcess, client: SandboxClient
) -> None:
    request = ExecRequest(argv=["echo", "one"], id="short")
    events = [e async for e in client.exec_stream(request)]
    assert [e.event for e in events] == ["start", "stdout", "exit"]
    port = int(daemon.url.rsplit(":", 1)[1])
    with pytest.raises(AssertionError, match="resume_past_end"):
        async for _ in _events(daemon, port, request, 5):
            pass
    assert [e async for e in _events(daemon, port, request, 1)][1:] == events[2:]


@pytest.mark.parametrize("daemon_args", [["--exec-detach-grace-s", "0.5"]])
async def test_a_kept_stream_nobody_comes_back_to_is_killed(
    daemon: DaemonProcess, client: SandboxClient
) -> None:
    request = ExecRequest(argv=["sleep", "30"], id="left-behind", timeout_s=60)
    async for event in client.exec_stream(request):
        assert event.event == "start"
        break  # hang up, and never come back

    async def ended() -> bool:
        return (await client.info()).running_execs == 0

    await wait_until_async(ended, timeout_s=10)
    result = await client.exec(argv=["true"])
    assert result.exit_code == 0


@pytest.mark.parametrize("daemon_args", [["--max-retained-execs", "3"]])
async def test_kept_results_are_bounded_in_count(client: SandboxClient, tmp_path: Path) -> None:
    log = tmp_path / "runs.log"
    for n in range(5):
        await client.exec(command=f"echo {n} >> {log}", id=f"kept-{n}")
    await client.exec(command=f"echo 4 >> {log}", id="kept-4")  # kept: not run again
    await client.exec(command=f"echo 0 >> {log}", id="kept-0")  # dropped: runs again
    wait_until(lambda: _lines(log) == ["0", "1", "2", "3", "4", "0"], timeout_s=5)
