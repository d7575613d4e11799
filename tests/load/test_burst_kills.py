"""``load.burst --announce --kill-facade-at --kill-leader-at`` at CI scale: issue 23's
"a facade replica SIGKILLed and the leader SIGKILLed during the claim burst: 0 handed
twice, 0 lost, every request answered (cold fallback counted)".

60 sandboxes announced on the ci profile (stand-in daemons answer the claims), then
requested in three batches of 20 through two facade replicas, with two controllers, in two
interleavings:

- **spread** (the requests over 2 s): the first answer kills a facade replica (none has a
  request in flight: the one the next request goes to), whose connection is then refused
  and the driver sends it to the other replica; the second answer (40 of 60, past half)
  kills the leader, and the last request finds no claims endpoint for the standby's lease
  time: it falls back cold in the same request;
- **at once** (all three sent together): the first answer kills the busiest replica and the
  leader together, the other requests in flight — mid-claim, their SandboxClaims written or
  not — and each request the killed replica held is sent again with its Idempotency-Key to
  the other, which must answer the same sandboxes.

What must hold exactly in both: every hand-over check (load/burst/handover.py) and the
run's others, both processes killed, every sandbox answered once and Ready, nothing
orphaned; a request moved in the first, and exactly the killed replica's in-flight
requests moved in the second.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from load.burst.progress import say
from load.burst.report import write_csv, write_markdown
from load.burst.run import _stack_settings, run_burst
from load.burst.settings import BurstSettings, Thresholds

N, BATCH = 60, 20


def _settings(tmp_path: Path, window_s: float = 2.0, leader_at: float = 0.5) -> BurstSettings:
    return BurstSettings(
        out=tmp_path,
        sandboxes=N,
        window_s=window_s,
        batch=BATCH,
        profile="ci",
        baseline_sample=0,
        ready_timeout_s=60,
        release_timeout_s=30,
        fill_timeout_s=90,
        announce=True,
        kill_facade_at=0.3,  # at the first of three requests answered
        kill_leader_at=leader_at,  # 0.5: at 30 of 60 answered, the second request's answer
        # A shared 2-core machine: smoke-test latencies; the failover itself (a 3 s lease)
        # and the cold fallback's start are inside the stall.
        thresholds=Thresholds(max_claimed_p50_s=2.0, max_claimed_p99_s=5.0, max_stall_s=15.0),
    )


def test_a_facade_kill_runs_two_replicas_and_needs_the_facade(tmp_path: Path) -> None:
    assert _stack_settings(_settings(tmp_path)).facade_replicas == 2
    assert _stack_settings(_settings(tmp_path)).controller_replicas == 2
    assert _stack_settings(BurstSettings(out=tmp_path)).facade_replicas == 1
    for bad in ({"kill_facade_at": 1.0}, {"kill_facade_at": 0.5, "direct": True}):
        with pytest.raises(ValueError, match=r"kill.facade.at"):
            BurstSettings(out=tmp_path, **bad)  # type: ignore[arg-type]


@pytest.mark.anyio
@pytest.mark.slow
@pytest.mark.timeout(150)
@pytest.mark.parametrize("interleaving", ["spread", "at once"])
async def test_a_facade_and_the_leader_killed_mid_claim_hand_nothing_twice(
    tmp_path: Path, interleaving: str
) -> None:
    at_once = interleaving == "at once"
    settings = _settings(tmp_path, 0.0, 0.3) if at_once else _settings(tmp_path)
    result = await run_burst(settings, say)
    text = write_markdown(result, tmp_path / "report.md")
    write_csv(result.sandboxes, tmp_path / "sandboxes.csv")
    h, a = result.handover, result.announce
    assert h is not None and a is not None, text
    assert result.ok, text
    assert result.facade_killed and result.leader_killed_at_s >= 0, text
    if at_once:  # all three sent at 0, the kill at the first answer: the others in flight
        assert result.facade_killed_in_flight >= 1, text
        # nothing was sent after the kill: exactly what the replica held was moved
        assert h.moved_requests == h.interrupted == result.facade_killed_in_flight, text
    else:
        assert h.moved_requests >= 1, text
    assert (h.requests, h.answered, h.answered_ids, h.ready) == (3, 3, N, N), text
    assert h.claimed + h.cold == N and h.claimed == a.claimed.count, text
    assert not h.twice and not h.twice_claimed and not h.orphaned and h.lost == 0, text
    assert h.claims >= 1 and result.left_after_release == 0, text
    assert "Hand-over: every request's answers" in text
