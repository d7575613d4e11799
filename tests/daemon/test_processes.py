"""Background processes against a real daemon: lifecycle, bounded output, signals."""

from __future__ import annotations

import pytest

from sandman.sdk.daemon_client import DaemonAPIError, SandboxClient
from tests.support.wait import wait_until_async

pytestmark = pytest.mark.anyio


async def test_start_poll_wait(client: SandboxClient) -> None:
    info = await client.start_process(
        command="for i in 1 2 3; do echo line $i; sleep 0.1; done; exit 4", name="loop"
    )
    assert info.running and info.name == "loop"
    listed = await client.list_processes()
    assert [p.id for p in listed.processes] == [info.id]
    done = await client.wait_process(info.id, timeout_s=10)
    assert (done.running, done.exit_code) == (False, 4)
    output = await client.process_output(info.id)
    assert output.stdout.data == "line 1\nline 2\nline 3\n"
    tail = await client.process_output(info.id, tail_bytes=7)
    assert tail.stdout.data == "line 3\n"
    assert tail.stdout.truncated
    await client.remove_process(info.id)
    with pytest.raises(DaemonAPIError) as gone:
        await client.process(info.id)
    assert gone.value.reason == "process_not_found"


async def test_signal_and_wait_timeout(client: SandboxClient) -> None:
    info = await client.start_process(argv=["sleep", "60"])
    still = await client.wait_process(info.id, timeout_s=0.2)
    assert still.running
    await client.signal_process(info.id, "TERM")
    done = await client.wait_process(info.id, timeout_s=10)
    assert (done.running, done.signal) == (False, "SIGTERM")
    await client.remove_process(info.id)


async def test_chatty_process_keeps_only_its_tail(client: SandboxClient) -> None:
    info = await client.start_process(command="seq 1 200000; echo END")
    await client.wait_process(info.id, timeout_s=20)
    output = await client.process_output(info.id)
    assert output.stdout.data.endswith("200000\nEND\n")
    assert output.stdout.total_bytes > len(output.stdout.data.encode())
    assert len(output.stdout.data) <= 256 * 1024
    await client.remove_process(info.id)


async def test_remove_stops_a_running_process(client: SandboxClient) -> None:
    info = await client.start_process(command="trap '' TERM; echo trapped; sleep 60")

    async def ignoring_term() -> bool:  # else a SIGTERM could still stop it
        return (await client.process_output(info.id)).stdout.data == "trapped\n"

    await wait_until_async(ignoring_term)
    removed = await client.remove_process(info.id)
    assert not removed.running
    assert removed.signal == "SIGKILL"


async def test_start_errors(client: SandboxClient) -> None:
    with pytest.raises(DaemonAPIError) as info:
        await client.start_process(argv=["/no/such/binary"])
    assert (info.value.status, info.value.reason) == (400, "spawn_failed")
    with pytest.raises(DaemonAPIError) as both:
        await client.start_process(argv=["true"], command="true")
    assert both.value.reason == "invalid_command"


@pytest.mark.parametrize("daemon_args", [["--max-processes", "2"]])
async def test_full_process_table_evicts_finished_then_refuses(client: SandboxClient) -> None:
    done = await client.start_process(argv=["true"])
    await client.wait_process(done.id, timeout_s=10)
    first = await client.start_process(argv=["sleep", "60"])
    second = await client.start_process(argv=["sleep", "60"])  # evicts the finished one
    assert {p.id for p in (await client.list_processes()).processes} == {first.id, second.id}
    with pytest.raises(DaemonAPIError) as full:
        await client.start_process(argv=["sleep", "60"])
    assert (full.value.status, full.value.reason) == (429, "too_many_processes")
    for proc in (first, second):
        await client.remove_process(proc.id)
