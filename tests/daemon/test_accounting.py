"""Every process a call starts is accounted for: stopping the call stops all of them.

Killing a process group misses what left it: a background process whose leader exited left
its children running when deleted, a closed session left its shell's jobs (each its own
group) running, and ``setsid`` escaped an exec's timeout. Stopping a call now stops its
*scope*: its session and group, every descendant, and every process still carrying the
call's marker in its environment (which ``setsid`` and double forks keep). The generated
cases build trees out of those escapes and check that nothing of them survives.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sandman.sdk.daemon_client import SandboxClient
from tests.support.wait import wait_until_async

pytestmark = pytest.mark.anyio

# Ways a shell command starts a process that outlives a plain group kill; each prints its pid.
ESCAPES = {
    "background": "sleep 60 & echo $!",
    "setsid": "setsid sh -c 'echo $$; exec sleep 60' & sleep 0.2",  # $$: setsid may fork
    "double fork": "(setsid sh -c 'sleep 60 & echo $!' &) ; sleep 0.2",
    "nohup": "nohup sleep 60 >/dev/null 2>&1 & echo $!",
    "ignores TERM": "sh -c 'trap \"\" TERM; exec sleep 60' & echo $!",
    "clean env child": "env -i /bin/sh -c 'sleep 60 & echo $!; wait' & sleep 0.2",
    "subshell job": "( sleep 60 ) & echo $!",
}


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _pids(text: str) -> list[int]:
    return [int(word) for word in text.split() if word.isdigit()]


async def _all_gone(pids: list[int]) -> None:
    assert pids
    await wait_until_async(lambda: not any(_alive(p) for p in pids), timeout_s=10)


async def test_removing_a_process_whose_leader_exited_stops_its_children(
    client: SandboxClient,
) -> None:
    info = await client.start_process(command=ESCAPES["background"] + "; " + ESCAPES["setsid"])
    await client.wait_process(info.id, timeout_s=10)
    pids = _pids((await client.process_output(info.id)).stdout.data)
    assert all(_alive(p) for p in pids)
    await client.remove_process(info.id)
    await _all_gone(pids)


async def test_closing_a_session_stops_its_jobs(client: SandboxClient) -> None:
    await client.create_session("s")
    pids: list[int] = []
    for escape in ("background", "setsid", "nohup", "subshell job"):
        pids += _pids((await client.run_in_session("s", ESCAPES[escape])).output.data)
    assert len(pids) == 4 and all(_alive(p) for p in pids)
    await client.close_session("s")
    await _all_gone(pids)


async def test_setsid_does_not_escape_an_exec_timeout(client: SandboxClient) -> None:
    result = await client.exec(
        command=f"{ESCAPES['setsid']}; {ESCAPES['double fork']}; sleep 60",
        timeout_s=1,
        kill_grace_s=0.2,
    )
    assert result.timed_out
    await _all_gone(_pids(result.stdout.data))


TREES = st.lists(st.sampled_from(sorted(ESCAPES)), min_size=1, max_size=4)


@settings(
    max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(escapes=TREES, how=st.sampled_from(["exec timeout", "process removal", "session close"]))
async def test_no_process_of_a_stopped_call_survives(
    client: SandboxClient, escapes: list[str], how: str
) -> None:
    script = "; ".join(ESCAPES[e] for e in escapes)
    if how == "exec timeout":
        result = await client.exec(command=script + "; sleep 60", timeout_s=1, kill_grace_s=0.2)
        pids = _pids(result.stdout.data)
    elif how == "process removal":
        info = await client.start_process(command=script + "; echo done; sleep 60")

        async def printed() -> bool:
            return "done" in (await client.process_output(info.id)).stdout.data

        await wait_until_async(printed)
        pids = _pids((await client.process_output(info.id)).stdout.data)
        await client.remove_process(info.id)
    else:
        await client.create_session("gen")
        try:
            pids = _pids((await client.run_in_session("gen", script)).output.data)
        finally:
            await client.close_session("gen")
    await _all_gone(pids)
