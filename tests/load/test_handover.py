"""The hand-over figures and checks (load/burst/handover.py) on hand-built answers: what
counts as handed twice, lost, orphaned, answered, and the cold fallback."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from load.burst.analysis import Check, SandboxTimes
from load.burst.driver import RequestRecord
from load.burst.handover import handover_checks, handover_markdown, summarize_handover


def _rows(ready: Sequence[str], claimed: Sequence[str] = ()) -> dict[str, SandboxTimes]:
    return {
        sid: SandboxTimes(sid, requested=0.0, ready=1.0, claimed=sid in claimed) for sid in ready
    }


def _record(k: int, ids: list[str], size: int | None = None, **kw: Any) -> RequestRecord:
    r = RequestRecord(k, size if size is not None else len(ids), f"run-{k}", 0.0, **kw)
    r.ids = list(ids)
    return r


def _ok(checks: list[Check]) -> dict[str, bool]:
    return {c.name.split(" (")[0]: c.ok for c in checks}


def test_a_clean_burst_passes_and_counts_the_cold_fallback() -> None:
    records = [
        _record(0, ["p-0", "p-1"], answered=0.1),
        _record(1, ["sb-a", "sb-b"], answered=0.2, moved=1, interrupted=1),
    ]
    h = summarize_handover(
        records,
        _rows(["p-0", "p-1", "sb-a", "sb-b"], claimed=["p-0", "p-1"]),
        {"claim-0": ["p-0", "p-1"]},
        {"p-0", "p-1", "sb-a", "sb-b"},
    )
    assert (h.requests, h.answered, h.requested, h.answered_ids, h.ready) == (2, 2, 4, 4, 4)
    assert (h.claimed, h.cold, h.lost, h.moved, h.interrupted, h.moved_requests) == (
        2, 2, 0, 1, 1, 1,
    )  # fmt: skip
    assert all(c.ok for c in handover_checks(h))
    assert "| answered: claimed from the pool / created cold (the fallback) | 2 / 2 |" in (
        "\n".join(handover_markdown(h))
    )


def test_one_sandbox_in_two_answers_or_two_claims_is_handed_twice() -> None:
    records = [_record(0, ["p-0"], answered=0.1), _record(1, ["p-0", "p-1"], answered=0.2)]
    h = summarize_handover(
        records, _rows(["p-0", "p-1"], ["p-0", "p-1"]), {"c0": ["p-0"], "c1": ["p-0", "p-1"]}, ()
    )
    assert h.twice == ("p-0",) and h.twice_claimed == ("p-0",)
    # Three members asked, two distinct sandboxes Ready: the third member is lost too.
    assert h.lost == 1
    ok = _ok(handover_checks(h))
    assert not ok["sandboxes handed to two requests"] and not ok["sandboxes lost"]


def test_typed_errors_are_counted_not_lost_and_a_request_without_answer_is_not_answered() -> None:
    records = [
        _record(0, ["sb-a"], size=3, answered=0.1, failed={"quota_exceeded": 2}),
        _record(1, [], size=2, gave_up="gave-up (connection-lost)"),
    ]
    h = summarize_handover(records, _rows(["sb-a"]), {}, {"sb-a"})
    assert h.typed_errors == {"quota_exceeded": 2}
    assert h.given_up == {"gave-up (connection-lost)": 2}
    assert (h.answered, h.lost) == (1, 2)  # the two members nobody answered
    ok = _ok(handover_checks(h))
    assert not ok["requests answered"] and not ok["sandboxes lost"]


def test_answered_but_never_ready_is_lost_and_its_pod_state_said() -> None:
    records = [_record(0, ["sb-a", "sb-b", "sb-c"], answered=0.1)]
    live = {"sb-a", "sb-b"}
    h = summarize_handover(records, _rows(["sb-a"]), {}, live, {"sb-b": "Unschedulable"})
    assert (h.answered_ids, h.ready, h.lost) == (3, 1, 2)
    assert h.not_ready == {"Unschedulable": 1, "gone": 1}  # sb-c: no pod any more
    lost = next(c for c in handover_checks(h) if c.name.startswith("sandboxes lost"))
    assert not lost.ok and "Unschedulable 1" in lost.value


def test_a_retry_that_answered_other_sandboxes_leaves_orphans() -> None:
    # The first attempt's answer named sb-a; the retry named sb-c instead: sb-a is still
    # live (the run's owner label) and nobody holds it any more.
    record = _record(0, ["sb-a", "sb-c"], size=1, answered=0.3, changed=1)
    h = summarize_handover([record], _rows(["sb-a", "sb-c"]), {}, {"sb-a", "sb-c", "sb-x"})
    assert h.changed == 1 and h.orphaned == ("sb-x",)
    assert not _ok(handover_checks(h))["retries answered other sandboxes"]
