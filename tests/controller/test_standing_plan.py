"""A standing pool's decision (controller/pool_plan.py, rule 4), driven over generated
snapshots.

Invariants, for any pool pods (any slots, states, claims), recorded next slot and room:
- slots only grow: a create's slot is above every slot the pool's pods, its spent names and
  its recorded ``next_slot`` have used, so a claimed slot is never re-used; the plan's new
  ``next_slot`` is above every create;
- never over-creates: no more creates than the reserve's shortfall, than ``max`` less the
  pool's pods that exist (claimed, failing and deleting ones included), than the
  namespace's room;
- a claimed pod or one being deleted is never deleted; a failed one or one on a lost node
  is;
- converges: carrying the plan out again and again ends with nothing to do, the reserve at
  ``min`` when ``max`` and the room allow it, and a restart (no memory, the same watches)
  then plans nothing either.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from controller.pool_plan import Announcement, PoolPlan, PoolPod, Standing, plan
from kube.pool_contract import pool_pod_name, pool_slot

NS, NAME, IMAGE = "ns-a", "standing-abc", "r.local/base:1"
Snapshot = tuple[Announcement, list[PoolPod], set[tuple[str, str]], int]


@st.composite
def snapshots(draw: st.DrawFn) -> Snapshot:
    low = draw(st.integers(0, 6))
    high = draw(st.integers(max(low, 1), 10))
    pool = Announcement(
        NS,
        NAME,
        ((IMAGE, high),),
        standing=Standing(low, high, next_slot=draw(st.integers(0, 12))),
    )
    pods: list[PoolPod] = []
    spent: set[tuple[str, str]] = set()
    for slot in draw(st.sets(st.integers(0, 15), max_size=10)):
        name = pool_pod_name(NAME, 0, slot)
        if draw(st.integers(0, 3)) == 0:
            spent.add((NS, name))
        if draw(st.integers(0, 4)) > 0:  # a spent name's pod may be gone
            pods.append(
                PoolPod(
                    NS,
                    name,
                    NAME,
                    draw(st.sampled_from(["starting", "ready", "failed"])),
                    node_ok=draw(st.integers(0, 4)) > 0,
                    deleting=draw(st.integers(0, 5)) == 0,
                )
            )
    return pool, pods, spent, draw(st.integers(0, 12))


def _reserve(pods: list[PoolPod], spent: set[tuple[str, str]]) -> list[PoolPod]:
    return [
        p
        for p in pods
        if (p.namespace, p.name) not in spent
        and not p.deleting
        and p.state != "failed"
        and p.node_ok
    ]


@settings(max_examples=400)
@given(snapshots())
def test_slots_only_grow_and_the_pool_never_over_creates(snap: Snapshot) -> None:
    pool, pods, spent, room = snap
    assert pool.standing is not None
    decided = plan([pool], pods, spent, {NS: room})
    used = [pool_slot(NAME, n) for _, n in spent] + [pool_slot(NAME, p.name) for p in pods]
    floor = max([s[1] + 1 for s in used if s] + [pool.standing.next_slot])
    slots = [c.slot for c in decided.creates]
    assert all(s >= floor for s in slots) and len(set(slots)) == len(slots)
    assert all(
        c.pod == pool_pod_name(NAME, 0, c.slot) and c.image == IMAGE for c in decided.creates
    )
    if slots:
        assert decided.next_slots == {(NS, NAME): max(slots) + 1}
    else:
        assert decided.next_slots == {}
    short = pool.standing.min - len(_reserve(pods, spent))
    assert len(slots) <= max(0, min(short, pool.standing.max - len(pods), room))
    deleted = {d.pod for d in decided.deletes}
    assert not deleted & {n for _, n in spent}
    assert not deleted & {p.name for p in pods if p.deleting}
    unhealthy = {p.name for p in pods if p.state == "failed" or not p.node_ok}
    going = {p.name for p in pods if p.deleting} | {n for _, n in spent}
    assert unhealthy - going <= deleted


def _carry_out(pods: list[PoolPod], decided: PoolPlan) -> list[PoolPod]:
    """The creates land (starting, on good nodes), the deletes and what was being deleted
    go."""
    gone = {d.pod for d in decided.deletes}
    kept = [p for p in pods if p.name not in gone and not p.deleting]
    return kept + [PoolPod(c.namespace, c.pod, c.announcement, "starting") for c in decided.creates]


@settings(max_examples=400)
@given(snapshots())
def test_carrying_the_plan_out_converges_and_a_restart_then_plans_nothing(snap: Snapshot) -> None:
    pool, pods, spent, room = snap
    assert pool.standing is not None
    sizes = pool.standing
    for _ in range(4):
        decided = plan([pool], pods, spent, {NS: room})
        room -= len(decided.creates)
        floor = decided.next_slots.get((NS, NAME), sizes.next_slot)
        pool = Announcement(NS, NAME, pool.images, standing=Standing(sizes.min, sizes.max, floor))
        pods = _carry_out(pods, decided)
    final = plan([pool], pods, spent, {NS: room})
    assert (final.creates, final.deletes) == ((), ())
    reserve = len(_reserve(pods, spent))
    claimed = len(pods) - reserve
    assert reserve <= sizes.min
    if room > 0 and claimed + sizes.min <= sizes.max:
        assert reserve == sizes.min
    # A restarted filler (the recorded next slot, no memory) sees the same: nothing to do.
    restarted = Announcement(NS, NAME, pool.images, standing=Standing(sizes.min, sizes.max, 0))
    again = plan([restarted], pods, spent, {NS: room})
    assert (again.creates, again.deletes) == ((), ())
