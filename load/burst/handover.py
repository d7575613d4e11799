"""Were the burst's sandboxes handed over right: none twice, none lost, every request answered.

Issue 23's invariant under faults: "with a facade replica SIGKILLed and the leader SIGKILLed
during the claim burst: 0 handed twice, 0 lost, every request answered (cold fallback
counted)". A report that only counted Ready sandboxes would pass a run that answered two
requests with one pool pod (both would look Ready) or answered a retry with a second set
of sandboxes (the first set orphaned, still Ready). So the figures come from every
request's answers as the trainer got them (the driver's records, load/burst/driver.py),
joined to what the cluster holds once the burst is over (the run's pods and its
SandboxClaims, listed before the release: load/burst/cluster.py ``run_sandboxes``):

- **handed twice**: a sandbox id in the answers of two requests (the id is its pod's name,
  or its ``sandman.io/sandbox`` label after a replacement, so across facade replicas one
  pod is one id); and, from the cluster's side, a pool pod named by two SandboxClaims;
- **a retry answered other sandboxes**: an id an earlier answer of a request named and a
  later one (the same Idempotency-Key) did not;
- **orphaned**: a live sandbox of the run (its owner label, or named by one of its claims)
  that no answer names — what a retry that created or claimed a second set leaves behind;
- **lost**: requested members neither answered and Ready nor refused with a typed error in
  the request's last answer (a member of a request that got no answer is lost too);
- **answered**: requests that ended with an answer (2xx, or an error with a reason), not
  given up after their attempts;
- **the cold fallback**: of the answered sandboxes, those claimed from the pool and those
  created cold (a claim that found no leader, no Ready pool pod, or a daemon that would not
  take it); the row's ``claimed`` mark (load/burst/announce.py ``Pool.adopt``).

Pure, like ``results.py``, and unit-tested (tests/load/test_handover.py).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from load.burst.analysis import Check, SandboxTimes
from load.burst.driver import RequestRecord

__all__ = ["Handover", "handover_checks", "handover_markdown", "reasons", "summarize_handover"]


@dataclass(frozen=True, slots=True)
class Handover:
    requests: int
    answered: int
    requested: int  # sandboxes, every request's count
    answered_ids: int  # distinct sandboxes named by the answers
    ready: int  # of those, Ready
    claimed: int  # of those, claimed from a pool
    cold: int  # the rest: created cold
    typed_errors: dict[str, int]  # reason -> members refused in a last answer
    given_up: dict[str, int]  # reason -> members of requests without an answer
    twice: tuple[str, ...]  # ids in two requests' answers
    twice_claimed: tuple[str, ...]  # pool pods in two SandboxClaims
    changed: int  # ids a retry's answer no longer named
    orphaned: tuple[str, ...]  # live sandboxes of the run no answer names
    lost: int
    moved: int  # attempts sent to another replica after a connection failed
    interrupted: int  # of those, lost with the request in flight
    moved_requests: int  # requests with at least one such attempt
    claims: int  # the run's SandboxClaims
    #: answered, not Ready once the burst was over, by pod state (e.g. Unschedulable)
    not_ready: dict[str, int]


def summarize_handover(
    records: Sequence[RequestRecord],
    rows: Mapping[str, SandboxTimes],
    claims: Mapping[str, Iterable[str]],
    live: Iterable[str],
    not_ready: Mapping[str, str] | None = None,
) -> Handover:
    """``records``: every request's answers; ``rows``: the burst's rows by sandbox id (Ready
    and claimed marks); ``claims``: the run's SandboxClaims (name -> pods); ``live``: the
    run's sandboxes that existed once the burst was over; ``not_ready``: those not Ready
    then, id -> why (their pod's state)."""
    per_request = [set(r.ids) for r in records]
    seen = Counter(sid for ids in per_request for sid in ids)
    answered = set(seen)
    in_claims = Counter(pod for pods in claims.values() for pod in set(pods))
    ready = {sid for sid in answered if sid in rows and rows[sid].ready is not None}
    claimed = {sid for sid in answered if sid in rows and rows[sid].claimed}
    typed: Counter[str] = Counter()
    given_up: Counter[str] = Counter()
    for r in records:
        if r.answered is not None:
            typed.update(r.failed)
        else:
            given_up[r.gave_up or "no answer"] += r.size - len(set(r.ids))
    requested = sum(r.size for r in records)
    return Handover(
        requests=len(records),
        answered=sum(1 for r in records if r.answered is not None),
        requested=requested,
        answered_ids=len(answered),
        ready=len(ready),
        claimed=len(claimed),
        cold=len(answered - claimed),
        typed_errors=dict(typed),
        given_up={k: v for k, v in given_up.items() if v},
        twice=tuple(sorted(sid for sid, n in seen.items() if n > 1)),
        twice_claimed=tuple(sorted(pod for pod, n in in_claims.items() if n > 1)),
        changed=sum(r.changed for r in records),
        orphaned=tuple(sorted(set(live) - answered)),
        lost=max(0, requested - len(ready) - sum(typed.values())),
        moved=sum(r.moved for r in records),
        interrupted=sum(r.interrupted for r in records),
        moved_requests=sum(1 for r in records if r.moved),
        claims=len(claims),
        not_ready=dict(Counter((not_ready or {}).get(sid, "gone") for sid in answered - ready)),
    )


def _few(ids: Sequence[str]) -> str:
    return (": " + ", ".join(ids[:3]) + (" ..." if len(ids) > 3 else "")) if ids else ""


def handover_checks(h: Handover) -> list[Check]:
    """0 handed twice, 0 lost, every request answered, and a retry's answer the same."""
    errors = sum(h.typed_errors.values())
    return [
        Check(
            "sandboxes handed to two requests (answers; pool pods in two SandboxClaims)",
            "0 (0)",
            f"{len(h.twice)} ({len(h.twice_claimed)}){_few(h.twice or h.twice_claimed)}",
            not h.twice and not h.twice_claimed,
        ),
        Check(
            "sandboxes lost (requested, neither answered Ready nor refused with a reason)",
            "0",
            f"{h.lost:,} (refused with a reason: {errors:,}; answered, not Ready: "
            f"{reasons(h.not_ready)})",
            h.lost == 0,
        ),
        Check("requests answered", f"{h.requests:,}", f"{h.answered:,}", h.answered == h.requests),
        Check(
            "retries answered other sandboxes (ids dropped; live sandboxes no answer names)",
            "0 (0)",
            f"{h.changed} ({len(h.orphaned)}){_few(h.orphaned)}",
            h.changed == 0 and not h.orphaned,
        ),
    ]


def reasons(counts: Mapping[str, int]) -> str:
    """``"a 2, b 1"`` (``"none"`` when empty)."""
    return ", ".join(f"{k} {v:,}" for k, v in sorted(counts.items())) or "none"


def handover_markdown(h: Handover) -> list[str]:
    """The report's hand-over section (Markdown lines)."""
    return [
        "",
        "### Hand-over: every request's answers",
        "",
        "| figure | value |",
        "|---|---|",
        f"| requests answered / sent | {h.answered:,} / {h.requests:,} |",
        f"| sandboxes requested / answered / of those Ready | {h.requested:,} / "
        f"{h.answered_ids:,} / {h.ready:,} |",
        f"| answered: claimed from the pool / created cold (the fallback) "
        f"| {h.claimed:,} / {h.cold:,} |",
        f"| members refused with a reason (last answer) | {reasons(h.typed_errors)} |",
        f"| members of requests given up (no answer) | {reasons(h.given_up)} |",
        f"| attempts moved to another replica after a connection failed (requests; "
        f"lost in flight) | {h.moved:,} ({h.moved_requests:,}; {h.interrupted:,}) |",
        f"| handed to two requests: ids in two answers / pool pods in two of the run's "
        f"{h.claims:,} SandboxClaims | {len(h.twice):,} / {len(h.twice_claimed):,} |",
        f"| a retry's answer dropped an id / live sandboxes no answer names | {h.changed:,} / "
        f"{len(h.orphaned):,} |",
        f"| answered, not Ready once the burst was over (by pod state) | {reasons(h.not_ready)} |",
        f"| lost | {h.lost:,} |",
    ]
