"""One-shot exec against a real daemon process: results, encodings, timeouts, streaming."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import time

import psutil
import pytest

from sandman.sdk.daemon_client import DaemonAPIError, SandboxClient
from tests.support.wait import wait_until_async

pytestmark = pytest.mark.anyio


async def test_argv_and_shell_string(client: SandboxClient) -> None:
    result = await client.exec(argv=["sh", "-c", "echo out; echo err >&2; exit 3"])
    assert (result.exit_code, result.stdout.data, result.stderr.data) == (3, "out\n", "err\n")
    shell = await client.exec(command="x=41; echo $((x + 1))")
    assert shell.exit_code == 0
    assert shell.stdout.data == "42\n"
    assert shell.signal is None
    assert not shell.timed_out


async def test_cwd_env_and_stdin(client: SandboxClient, tmp_path: object) -> None:
    result = await client.exec(
        command="pwd; echo $GREETING; cat", cwd="/", env={"GREETING": "hi"}, stdin="in\n"
    )
    assert result.stdout.data == "/\nhi\nin\n"
    binary = await client.exec(argv=["od", "-An", "-tx1"], stdin=b"\x00\xff")
    assert binary.stdout.data.split() == ["00", "ff"]


async def test_non_utf8_output_is_base64(client: SandboxClient) -> None:
    result = await client.exec(argv=["printf", "ok\\377\\376"])
    assert result.stdout.encoding == "base64"
    assert base64.b64decode(result.stdout.data) == b"ok\xff\xfe"


async def test_output_cap_truncates_without_splitting_characters(client: SandboxClient) -> None:
    result = await client.exec(command="printf 'aé%.0s' $(seq 1 100)", max_output_bytes=5)
    assert result.stdout.truncated
    assert result.stdout.total_bytes == 300
    assert result.stdout.encoding == "utf-8"
    assert result.stdout.data == "aéa"  # 5 bytes would cut the second é in half


async def test_output_flood_keeps_daemon_memory_bounded(client: SandboxClient) -> None:
    before = (await client.info()).usage.daemon_rss_bytes
    result = await client.exec(command="head -c 200000000 /dev/zero", max_output_bytes=1 << 20)
    after = (await client.info()).usage.daemon_rss_bytes
    assert result.stdout.total_bytes == 200_000_000
    assert len(result.stdout.data) == 1 << 20
    assert after - before < 32 << 20, f"RSS grew by {(after - before) >> 20} MiB"


async def test_timeout_kills_the_whole_process_group(client: SandboxClient) -> None:
    started = time.monotonic()
    result = await client.exec(
        command="sleep 60 & echo $!; sleep 60", timeout_s=0.5, kill_grace_s=0.5
    )
    assert result.timed_out
    assert result.signal == "SIGTERM"
    assert time.monotonic() - started < 5
    grandchild = int(result.stdout.data.strip())
    with contextlib.suppress(psutil.NoSuchProcess):  # gone, or a zombie not yet reaped
        assert psutil.Process(grandchild).status() == "zombie"


async def test_timeout_escalates_to_kill_when_term_is_ignored(client: SandboxClient) -> None:
    result = await client.exec(command="trap '' TERM; sleep 60", timeout_s=0.3, kill_grace_s=0.3)
    assert result.timed_out
    assert result.signal == "SIGKILL"


async def test_backgrounded_child_does_not_hold_the_response(client: SandboxClient) -> None:
    started = time.monotonic()
    result = await client.exec(command="sleep 30 & echo started")
    assert result.exit_code == 0
    assert result.stdout.data == "started\n"
    assert time.monotonic() - started < 5  # the sleep keeps running; the daemon stops it at exit


async def test_spawn_failure_is_a_result_like_a_shell(client: SandboxClient) -> None:
    result = await client.exec(argv=["/definitely/not/here"])
    assert result.exit_code == 127
    assert result.spawn_error is not None and "No such file" in result.spawn_error


async def test_interrupt_a_running_exec(client: SandboxClient) -> None:
    task = asyncio.ensure_future(client.exec(argv=["sleep", "30"], id="long-one"))

    async def interrupted() -> bool:
        try:
            await client.signal_exec("long-one", "INT")
        except DaemonAPIError as exc:
            if exc.reason != "exec_not_found":
                raise
            raise AssertionError("the exec has not started yet") from exc
        return True

    await wait_until_async(interrupted)
    result = await task
    assert result.interrupted
    assert result.signal == "SIGINT"


async def test_streaming_delivers_chunks_before_exit(client: SandboxClient) -> None:
    seen: list[tuple[str, float]] = []
    started = time.monotonic()
    async for event in client.exec_stream(
        command="echo one; sleep 0.5; echo two >&2; printf '\\377'"
    ):
        seen.append((event.event, time.monotonic() - started))
        if event.event == "stdout" and event.encoding == "base64":
            assert base64.b64decode(event.data or "") == b"\xff"
        if event.event == "exit":
            assert event.result is not None
            assert event.result.exit_code == 0
            assert event.result.stderr.data == "two\n"
    kinds = [kind for kind, _ in seen]
    assert kinds[0] == "start" and kinds[-1] == "exit"
    assert {"stdout", "stderr"} <= set(kinds)
    first_stdout = next(t for kind, t in seen if kind == "stdout")
    assert first_stdout < seen[-1][1] - 0.3, "first chunk only arrived with the exit"


async def running_execs(client: SandboxClient, n: int) -> bool:
    return (await client.info()).running_execs == n


@pytest.mark.parametrize("daemon_args", [["--max-concurrent-execs", "2"]])
async def test_concurrent_exec_cap_answers_429(client: SandboxClient) -> None:
    running = [asyncio.ensure_future(client.exec(argv=["sleep", "1"])) for _ in range(2)]
    await wait_until_async(lambda: running_execs(client, 2))
    with pytest.raises(DaemonAPIError) as info:
        await client.exec(argv=["true"])
    assert (info.value.status, info.value.reason) == (429, "too_many_execs")
    assert all(r.exit_code == 0 for r in await asyncio.gather(*running))
    assert (await client.exec(argv=["true"])).exit_code == 0


async def test_many_short_execs_leave_no_zombies(client: SandboxClient) -> None:
    results = await asyncio.gather(*(client.exec(argv=["true"]) for _ in range(50)))
    assert all(r.exit_code == 0 for r in results)
    info = await client.info()
    assert info.running_execs == 0


async def test_large_stdin_is_fed_without_deadlock(client: SandboxClient) -> None:
    payload = bytes(range(256)) * 8192  # 2 MiB: far more than a pipe buffer
    result = await client.exec(argv=["sh", "-c", "wc -c"], stdin=payload)
    assert result.stdout.data.strip() == str(len(payload))


async def test_stream_client_disconnect_kills_the_command(client: SandboxClient) -> None:
    pid = None
    async with contextlib.aclosing(client.exec_stream(command="echo $$; sleep 60")) as events:
        async for event in events:
            if event.event == "stdout":
                pid = int((event.data or "").split()[0])
                break  # closing the stream closes the HTTP response mid-stream
    assert pid is not None

    def gone() -> bool:
        try:
            return psutil.Process(pid).status() == "zombie"
        except psutil.NoSuchProcess:  # (reaped between two looks, too)
            return True

    await wait_until_async(gone)
    assert (await client.info()).running_execs == 0
