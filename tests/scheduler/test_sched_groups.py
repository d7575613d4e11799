"""Groups (scheduler/gang.py): a group's pods are placed all or nothing, on as few nodes as
fit, after all of them are pending; its rejection is one expected status for every member.

The property tests generate clusters (node sizes, pods already on them) and bursts of
groups mixed with ungrouped pods, and check against an oracle that knows nothing of the
placer: the fewest nodes that could hold a group is the smallest k whose k largest free
slot counts (judged before the group, after the groups placed before it) add up to G."""

from __future__ import annotations

from itertools import pairwise
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from kube.contract import ANNOTATION_GROUP as CONTRACT_GROUP
from kube.contract import ANNOTATION_GROUP_SIZE as CONTRACT_GROUP_SIZE
from scheduler import Scheduler, SchedulerSettings
from scheduler.decoder import ANNOTATION_GROUP, ANNOTATION_GROUP_SIZE
from scheduler.gang import choose_nodes
from tests.support.pods import node_json, pod_json

Json = dict[str, Any]


def member(uid: str, group: str, size: int, *, cpu: str = "1", image: str = "") -> Json:
    pod = pod_json(uid, cpu=cpu, memory="1Gi", image=image or f"registry.local/{group}:1")
    pod["metadata"]["annotations"] = {ANNOTATION_GROUP: group, ANNOTATION_GROUP_SIZE: str(size)}
    return pod


def cluster(cpus: list[int], settings: SchedulerSettings | None = None) -> Scheduler:
    s = Scheduler(settings or SchedulerSettings())
    for i, cpu in enumerate(cpus):
        s.upsert_node(node_json(f"n{i}", cpu=str(cpu), memory="1000Gi"))
    return s


def test_the_contract_and_the_scheduler_spell_the_annotations_alike() -> None:
    assert (ANNOTATION_GROUP, ANNOTATION_GROUP_SIZE) == (CONTRACT_GROUP, CONTRACT_GROUP_SIZE)


def test_a_group_lands_on_one_node_where_ungrouped_pods_spread() -> None:
    """16 pods of one image on 8 roomy nodes: ungrouped, the start-queue cap (5) spreads
    them over 4 nodes (4 pulls); as a group they share one node and one pull."""
    loose = cluster([32] * 8).plan(
        [pod_json(f"p{i}", cpu="1", image="registry.local/t:1") for i in range(16)], now=0.0
    )
    assert loose.nodes_used == 4
    grouped = cluster([32] * 8).plan([member(f"g{i}", "t", 16) for i in range(16)], now=0.0)
    assert len(grouped.assignments) == 16 and grouped.nodes_used == 1


def test_a_group_prefers_the_node_that_holds_its_image() -> None:
    s = cluster([32] * 6)
    s.set_prepared_images("n4", ["registry.local/t:1"])
    plan = s.plan([member(f"g{i}", "t", 8) for i in range(8)], now=0.0)
    assert plan.by_node() == {"n4": 8}


def test_a_group_that_does_not_fit_is_not_placed_at_all() -> None:
    s = cluster([4, 4, 4])  # 12 one-CPU slots for a group of 13
    plan = s.plan([member(f"g{i}", "big", 13) for i in range(13)], now=0.0)
    assert plan.assignments == ()
    assert len(plan.unschedulable) == 13
    assert {u.message for u in plan.unschedulable} == {
        "group sandboxes/big: 13 sandboxes are placed together or not at all, and only 12 fit on 3 "
        "feasible node(s)"
    }
    assert s.stats()["reserved"] == 0  # nothing reserved: the capacity stays free
    assert len(s.plan([pod_json(f"p{i}", cpu="1") for i in range(12)], now=0.0).assignments) == 12


def test_members_wait_across_plans_until_the_group_is_complete() -> None:
    s = cluster([32] * 4, SchedulerSettings(group_wait_s=10.0))
    first = s.plan([member(f"g{i}", "t", 6) for i in range(4)], now=0.0)
    assert first.assignments == () and first.unschedulable == ()
    assert sorted(first.waiting) == [f"g{i}" for i in range(4)]
    # A dry run neither places nor forgets the waiting members.
    dry = s.plan([member("g4", "t", 6), member("g5", "t", 6)], now=1.0, reserve=False)
    assert len(dry.assignments) == 6
    second = s.plan([member("g4", "t", 6), member("g5", "t", 6)], now=1.0)
    assert len(second.assignments) == 6 and second.nodes_used == 1
    # Admitted now: a replacement member is placed on its own, without waiting.
    later = s.plan([member("g6", "t", 6)], now=2.0)
    assert len(later.assignments) == 1


def test_an_incomplete_group_is_reported_after_its_wait() -> None:
    # ... and a deleted member waits no more.
    s = cluster([32] * 2, SchedulerSettings(group_wait_s=5.0))
    s.plan([member("a", "t", 3), member("b", "t", 3)], now=0.0)
    s.delete_pod(member("b", "t", 3))
    assert set(s.plan([], now=1.0).waiting) == {"a"}
    late = s.plan([], now=6.0)
    assert [u.uid for u in late.unschedulable] == ["a"]
    assert "1 of 3 members pending" in late.unschedulable[0].message


def test_a_malformed_group_size_places_the_pod_on_its_own() -> None:
    pod = member("x", "t", 3)
    pod["metadata"]["annotations"][ANNOTATION_GROUP_SIZE] = "lots"
    assert len(cluster([8]).plan([pod], now=0.0).assignments) == 1


# --- properties -----------------------------------------------------------------------------
def fewest_nodes(free: list[int], need: int) -> int | None:
    """The oracle: smallest k whose k largest free slot counts hold ``need``."""
    total = 0
    for k, slots in enumerate(sorted(free, reverse=True), start=1):
        total += slots
        if total >= need:
            return k
    return None


bursts = st.fixed_dictionaries(
    {
        "cpus": st.lists(st.integers(0, 12), min_size=1, max_size=8),
        "groups": st.lists(st.integers(1, 24), min_size=1, max_size=5),
        "loose": st.integers(0, 10),
    }
)


@settings(max_examples=150, deadline=None)
@given(burst=bursts)
def test_groups_are_all_or_nothing_on_the_fewest_nodes(burst: dict[str, Any]) -> None:
    cpus, sizes = burst["cpus"], burst["groups"]
    s = cluster(cpus)
    pods = [member(f"g{k}-{i}", f"t{k}", size) for k, size in enumerate(sizes) for i in range(size)]
    pods += [pod_json(f"loose-{i}", cpu="1", memory="1Gi") for i in range(burst["loose"])]
    plan = s.plan(pods, now=0.0)
    placed: dict[str, set[str]] = {}
    for a in plan.assignments:
        placed.setdefault(a.uid.rsplit("-", 1)[0], set()).add(a.node)
    counts: dict[str, int] = {}
    for a in plan.assignments:
        counts[a.uid.rsplit("-", 1)[0]] = counts.get(a.uid.rsplit("-", 1)[0], 0) + 1
    unschedulable = {u.uid for u in plan.unschedulable}
    # Groups are placed first, in order: replay the free slots to know what each one saw.
    free = list(cpus)
    for k, size in enumerate(sizes):
        name = f"g{k}"
        members = {f"{name}-{i}" for i in range(size)}
        if name in counts:
            assert counts[name] == size, "all or nothing"
            assert not members & unschedulable
            assert len(placed[name]) == fewest_nodes(free, size), (free, size, placed[name])
            for a in plan.assignments:
                if a.uid in members:
                    free[int(a.node[1:])] -= 1
        else:
            assert members <= unschedulable, "a rejected group's members are all reported"
            assert fewest_nodes(free, size) is None, (free, size)
    assert min(free) >= 0
    # Capacity holds: no node got more one-CPU pods than it has CPUs.
    by_node = plan.by_node()
    assert all(by_node.get(f"n{i}", 0) <= cpu for i, cpu in enumerate(cpus))


@settings(max_examples=200, deadline=None)
@given(
    slots=st.dictionaries(st.integers(0, 20), st.integers(0, 10), max_size=10),
    holders=st.sets(st.integers(0, 20)),
    need=st.integers(1, 40),
)
def test_choose_nodes_covers_exactly_on_the_fewest_nodes(
    slots: dict[int, int], holders: set[int], need: int
) -> None:
    chosen = choose_nodes(slots, holders, {}, need)
    best = fewest_nodes(list(slots.values()), need)
    if best is None:
        assert chosen is None
        return
    assert chosen is not None and sum(chosen.values()) == need
    assert len(chosen) == best
    assert all(0 < n <= slots[i] for i, n in chosen.items())
    # Among equally large nodes, the image's holders come first.
    order = sorted(slots, key=lambda i: -min(slots[i], need))
    for a, b in pairwise(order):
        if min(slots[a], need) == min(slots[b], need) and b in chosen and a not in chosen:
            assert b in holders or a not in holders
