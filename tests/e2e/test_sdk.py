"""The trainer SDK end to end: AsyncSandman/Sandman → facade → simcluster pods → daemons."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from facade.leases import lease_name
from kube import LEASES, KubeClient
from sandman import (
    AsyncSandbox,
    AsyncSandman,
    ImagePullFailed,
    InvalidRequest,
    SandboxNotFound,
    SandboxStartError,
    SandboxTerminated,
    SandboxTimeout,
    Sandman,
    TerminalError,
    Unauthenticated,
    Unschedulable,
)
from tests.support.kube import FAST
from tests.support.stack import RunningStack as Stack
from tests.support.wait import wait_until, wait_until_async

pytestmark = pytest.mark.timeout(90)
IMAGE = "registry.example/tasks/demo:1"


def _client(stack: Stack, owner: str, **kwargs: object) -> AsyncSandman:
    return AsyncSandman(stack.url, stack.token, owner=owner, **kwargs)  # type: ignore[arg-type]


async def _gone(stack: Stack, owner: str, timeout_s: float = 20) -> None:
    """Until nothing of the owner is listed any more (its pod processes have exited)."""
    async with _client(stack, owner, lease_s=None, release_on_exit=False) as observer:

        async def none_listed() -> bool:
            listed = [s.id async for s in observer.list()]
            assert not listed, f"still listed after release: {listed}"
            return True

        await wait_until_async(none_listed, timeout_s=timeout_s, interval_s=0.2)


async def _released(sandbox: AsyncSandbox, timeout_s: float = 5) -> bool:
    """Released (or gone) as the facade reports it; polled, because a GET right after a
    DELETE can still show the pod's pre-delete state until the watch event arrives."""

    async def released() -> bool:
        try:
            await sandbox.refresh()
        except SandboxNotFound:
            return True
        assert sandbox.state in ("releasing", "terminated"), f"{sandbox.id} is {sandbox.state}"
        return True

    return await wait_until_async(released, timeout_s=timeout_s, interval_s=0.1)


@pytest.mark.anyio
async def test_create_exec_state_persists_then_release(stack: Stack, owner: str) -> None:
    async with _client(stack, owner) as client:
        sandbox = await client.create(IMAGE, env={"TASK": "t1"}, labels={"task": "t1"})
        assert sandbox.state == "ready" and sandbox.view.labels == {"task": "t1"}
        async with sandbox:
            first = await sandbox.exec("cd /tmp && echo $TASK > note && echo out; echo err >&2")
            assert (first.exit_code, first.stdout, first.stderr) == (0, "out\n", "err\n")
            assert await sandbox.files.read_text("/tmp/note") == "t1\n"
            argv = await sandbox.exec(["sh", "-c", "cat; exit 3"], stdin=b"\xff\x00")
            assert argv.exit_code == 3 and argv.stdout_bytes == b"\xff\x00" and not argv.ok
            slow = await sandbox.exec("sleep 5", timeout_s=0.5)
            assert slow.timed_out and slow.exit_code is None

            shell = await sandbox.session("agent")
            await shell.run("cd /tmp; export Y=2")
            assert (await shell.run("echo $Y $(pwd)")).output.strip() == "2 /tmp"
            again = await sandbox.session("agent")  # attaches to the same shell
            assert (await again.run("echo $Y")).output.strip() == "2"

            events = [e async for e in sandbox.exec_stream("echo a; sleep 0.1; echo b >&2")]
            assert events[0].kind == "start" and events[-1].kind == "exit"
            assert b"".join(e.data for e in events if e.kind == "stdout") == b"a\n"
            assert events[-1].result is not None and events[-1].result.exit_code == 0
        assert await _released(sandbox)
        with pytest.raises((SandboxTerminated, SandboxNotFound)):
            await sandbox.exec("true")
        await _gone(stack, owner)


@pytest.mark.anyio
async def test_files_and_processes(stack: Stack, owner: str, tmp_path: Path) -> None:
    async with _client(stack, owner) as client, await client.create(IMAGE) as sandbox:
        files = sandbox.files
        await files.write("/tmp/w/a.txt", "hello")
        stat = await files.stat("/tmp/w/a.txt")
        assert stat.size == 5 and stat.type == "file"
        await files.move("/tmp/w/a.txt", "/tmp/w/b.txt")
        assert [e.name for e in await files.list("/tmp/w")] == ["b.txt"]
        assert not await files.exists("/tmp/w/a.txt")
        (tmp_path / "src" / "pkg").mkdir(parents=True)
        (tmp_path / "src" / "pkg" / "mod.py").write_text("x = 1\n")
        await files.upload_dir(tmp_path / "src", "/tmp/up")
        assert (await sandbox.exec("cat /tmp/up/pkg/mod.py")).stdout == "x = 1\n"
        target = await files.download_dir("/tmp/up", tmp_path / "back")
        assert (target / "pkg" / "mod.py").read_text() == "x = 1\n"
        await files.remove("/tmp/w", recursive=True)
        assert not await files.exists("/tmp/w")

        proc = await sandbox.processes.start("for i in 1 2 3; do echo tick $i; done", name="t")
        done = await sandbox.processes.wait(proc.id, timeout_s=10)
        assert done.exit_code == 0 and not done.running
        assert (await sandbox.processes.logs(proc.id)).stdout.split()[-1] == "3"
        info = await sandbox.info()
        assert info.uptime_s > 0
    await _gone(stack, owner)


@pytest.mark.anyio
async def test_create_many_concurrent_exec_and_list(stack: Stack, owner: str) -> None:
    async with _client(stack, owner) as client:
        sandboxes = await client.create_many(20, IMAGE, labels={"batch": "b1"})
        assert len({s.id for s in sandboxes}) == 20
        assert {s.state for s in sandboxes} == {"ready"}
        results = await asyncio.gather(*(s.exec(f"echo {i}") for i, s in enumerate(sandboxes)))
        assert [r.stdout for r in results] == [f"{i}\n" for i in range(20)]
        listed = [s.id async for s in client.list(labels={"batch": "b1"}, page_size=7)]
        assert sorted(listed) == sorted(s.id for s in sandboxes)
        assert [s async for s in client.list(labels={"batch": "other"})] == []
    # Leaving the client's block released the whole run in one call.
    await _gone(stack, owner)


@pytest.mark.anyio
async def test_context_managers_release_on_exception_and_cancellation(
    stack: Stack, owner: str
) -> None:
    async with _client(stack, owner) as client:
        with pytest.raises(RuntimeError, match="agent crashed"):
            async with await client.create(IMAGE) as crashed:
                raise RuntimeError("agent crashed")
        assert await _released(crashed)

        holder: list[AsyncSandbox] = []
        created = asyncio.Event()

        async def rollout() -> None:
            async with await client.create(IMAGE) as sandbox:
                holder.append(sandbox)
                created.set()
                await asyncio.sleep(60)

        task = asyncio.create_task(rollout())
        await created.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert await _released(holder[0])

        with pytest.raises(SandboxTimeout) as timeout:
            await client.create(IMAGE, timeout_s=0.001)  # released before the error propagates
        assert timeout.value.sandbox is not None and timeout.value.sandbox.state != "ready"
        assert await _released(AsyncSandbox(client.transport, timeout.value.sandbox))
        await _gone(stack, owner)

    async def run_that_crashes() -> None:
        async with _client(stack, owner) as client:
            await client.create(IMAGE, wait=False)
            await client.create(IMAGE, wait=False)
            raise ValueError("run ended")

    with pytest.raises(ValueError, match="run ended"):
        await run_that_crashes()
    await _gone(stack, owner)


@pytest.mark.anyio
async def test_typed_errors(stack: Stack, owner: str) -> None:
    async with _client(stack, owner) as client:
        with pytest.raises(InvalidRequest) as invalid:
            await client.create(IMAGE, sandbox_class="no-such-class")
        assert invalid.value.reason == "unknown_class" and invalid.value.status == 400
        with pytest.raises(SandboxNotFound):
            await client.get("sb-does-not-exist")
        with pytest.raises(Unschedulable) as unschedulable:  # 64 CPUs: no node has them
            await client.create(IMAGE, sandbox_class="huge", timeout_s=3)
        assert unschedulable.value.sandbox is not None
        assert unschedulable.value.sandbox.state == "pending"
        assert "nodes are available" in unschedulable.value.message
        sandbox = await client.create(IMAGE)
        await sandbox.release()
        await sandbox.release()  # twice is harmless
        assert await _released(sandbox)
        with pytest.raises((SandboxTerminated, SandboxNotFound)) as gone:
            await sandbox.exec("true")
        assert isinstance(gone.value, TerminalError)
        await _gone(stack, owner)
    with pytest.raises(ImagePullFailed) as pull:
        async with _client(stack, owner) as client:
            await client.create("registry.invalid/tasks/missing:1", timeout_s=30)
    assert pull.value.sandbox is not None and pull.value.sandbox.state == "failed"
    assert isinstance(pull.value, SandboxStartError)
    with pytest.raises(Unauthenticated):
        async with AsyncSandman(stack.url, "not-the-token", owner=owner):
            pass


def test_sync_wrapper(stack: Stack, owner: str, tmp_path: Path) -> None:
    with Sandman(stack.url, stack.token, owner=owner) as client:
        assert "tiny" in [c.name for c in client.classes()]
        with client.create(IMAGE) as sandbox:
            assert sandbox.exec("echo hi").stdout == "hi\n"
            with sandbox.session("s") as shell:
                shell.run("cd /tmp")
                assert shell.run("pwd").output.strip() == "/tmp"
            chunks = [e.text for e in sandbox.exec_stream("echo 1; echo 2") if e.kind == "stdout"]
            assert "".join(chunks) == "1\n2\n"
            sandbox.files.write("f.txt", b"data")
            assert sandbox.files.read("f.txt") == b"data"
            assert [s.id for s in client.list()] == [sandbox.id]
        assert sandbox.state == "releasing"  # the facade's answer to the release on exit
        many = client.create_many(3, IMAGE)
        assert len(many) == 3 and all(s.state == "ready" for s in many)
    with Sandman(stack.url, stack.token, owner=owner, lease_s=None) as observer:
        wait_until(lambda: not list(observer.list()), timeout_s=20, interval_s=0.2)


@pytest.mark.anyio
async def test_a_run_that_stops_renewing_loses_its_sandboxes(stack: Stack, owner: str) -> None:
    """A crashed trainer (renewals stop, nothing released) leaks for one lease duration."""
    client = _client(stack, owner, lease_s=5, release_on_exit=False)
    kubeconfig = str(stack.stack.kubeconfig)
    async with client, await KubeClient.connect(FAST, kubeconfig=kubeconfig) as kube:
        sandbox = await client.create(IMAGE)

        async def renewed() -> bool:  # by the background task (every 5/3 s), not the create
            lease = await kube.get(LEASES, lease_name(owner), stack.stack.namespace())
            spec = lease["spec"]
            assert spec["renewTime"] != spec["acquireTime"], spec
            return True

        await wait_until_async(renewed, timeout_s=5, interval_s=0.1)
        assert (await sandbox.refresh()).state == "ready"
        await client.stop_lease()  # the "crash": no more renewals, no release

        async def collected() -> bool:
            try:
                await sandbox.refresh()
            except SandboxNotFound:
                return True  # collected and its tombstone already expired
            assert sandbox.state == "terminated", f"still {sandbox.state} after the lease lapsed"
            if sandbox.reason == "deleted":
                return False  # the collector's Event names the reason just after the delete
            if sandbox.reason != "owner_expired":
                pytest.fail(f"terminated for another reason: {sandbox.view}")
            return True

        await wait_until_async(collected, timeout_s=20, interval_s=0.25)
    await _gone(stack, owner)
