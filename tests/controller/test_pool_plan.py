"""The pool filler's decision (controller/pool_plan.py), driven over generated snapshots.

Invariants, for any announcements, pool pods and claimed names:
- never over-create: no create names a pod that exists or a spent (claimed) name, no name
  twice, and no announcement ends up with more pods than it wants per image;
- a claimed pod is never deleted, nor a pod already being deleted;
- complete: after the creates land and the deletes go, the next decision creates exactly the
  deleted slots that are still wanted (a restart mid-fill re-plans to nothing new) — and
  after those, nothing;
- nothing lingers: every unclaimed pod of an ended announcement is deleted;
- earliest deadline first: the creates' deadlines never decrease.
"""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from controller.pool_plan import Announcement, PoolPod, plan, wanted_names

NS = ("ns-a", "ns-b")


@st.composite
def snapshots(
    draw: st.DrawFn,
) -> tuple[list[Announcement], list[PoolPod], set[tuple[str, str]]]:
    announcements = []
    for k in range(draw(st.integers(0, 4))):
        images = tuple(
            (f"r.local/img-{k}-{i}:1", draw(st.integers(1, 5)))
            for i in range(draw(st.integers(1, 3)))
        )
        announcements.append(
            Announcement(
                namespace=draw(st.sampled_from(NS)),
                name=f"prep-{k}",
                images=images,
                deadline=draw(st.none() | st.floats(0, 100)),
                created=float(k),
                live=draw(st.booleans()),
            )
        )
    pods: list[PoolPod] = []
    spent: set[tuple[str, str]] = set()
    for a in announcements:
        names = [*wanted_names(a), f"{a.name}-p9-0"]  # one slot it does not want
        for name in names:
            if draw(st.booleans()):
                pods.append(
                    PoolPod(
                        namespace=a.namespace,
                        name=name,
                        pool=a.name,
                        state=draw(st.sampled_from(["starting", "ready", "failed"])),
                        node_ok=draw(st.booleans()),
                        deleting=draw(st.booleans()),
                    )
                )
            if draw(st.integers(0, 3)) == 0:
                spent.add((a.namespace, name))
    return announcements, pods, spent


@settings(max_examples=300)
@given(snapshots())
def test_the_plan_never_over_creates_and_never_touches_a_claimed_pod(
    snap: tuple[list[Announcement], list[PoolPod], set[tuple[str, str]]],
) -> None:
    announcements, pods, spent = snap
    decided = plan(announcements, pods, spent)
    present = {(p.namespace, p.name) for p in pods}
    created = [(c.namespace, c.pod) for c in decided.creates]
    assert len(created) == len(set(created))
    assert not set(created) & (present | spent)
    deleted = {(d.namespace, d.pod) for d in decided.deletes}
    assert not deleted & spent
    assert not deleted & {(p.namespace, p.name) for p in pods if p.deleting}
    for a in announcements:
        mine = {(p.namespace, p.name) for p in pods if p.pool == a.name}
        if not a.live:
            assert not any(c.announcement == a.name for c in decided.creates)
            # nothing lingers: every unclaimed pod not already going is deleted
            going = {(p.namespace, p.name) for p in pods if p.deleting}
            assert mine - spent - going <= deleted
            continue
        wanted = wanted_names(a)
        after = (mine | {k for k in created if k[0] == a.namespace}) - deleted
        for i, (_image, count) in enumerate(a.images):
            slots = {n for n, (j, _, _) in wanted.items() if j == i}
            assert len({k for k in after if k[1] in slots}) <= count
    deadlines = [
        next(a.deadline for a in announcements if a.name == c.announcement) for c in decided.creates
    ]
    keyed = [math.inf if d is None else d for d in deadlines]
    assert keyed == sorted(keyed)


@settings(max_examples=300)
@given(snapshots())
def test_after_the_plan_is_carried_out_a_restart_replans_only_the_replacements(
    snap: tuple[list[Announcement], list[PoolPod], set[tuple[str, str]]],
) -> None:
    announcements, pods, spent = snap
    first = plan(announcements, pods, spent)
    # Carry it out: the creates land (starting, on good nodes), the deletes go, and what was
    # being deleted is gone too.
    deleted = {(d.namespace, d.pod) for d in first.deletes}
    kept = [p for p in pods if (p.namespace, p.name) not in deleted and not p.deleting]
    landed = [PoolPod(c.namespace, c.pod, c.announcement, "starting") for c in first.creates]
    # A new process (a restart) sees the same watches and the same claims: it creates
    # only what the deletes freed, for announcements that still want it.
    second = plan(announcements, kept + landed, spent)
    freed = {(p.namespace, p.name) for p in pods if (p.namespace, p.name) in deleted or p.deleting}
    assert {(c.namespace, c.pod) for c in second.creates} <= freed
    assert second.deletes == ()  # what the first kept is healthy, wanted or claimed
    third = plan(
        announcements,
        kept
        + landed
        + [PoolPod(c.namespace, c.pod, c.announcement, "ready") for c in second.creates],
        spent,
    )
    assert third.creates == ()
