"""The facade's watch-cache index, fed the way an informer feeds it (same Cache, same handler
calls), with a fake clock: read-your-writes, replacements, tombstones with the collector's
reason, waits resolved by events, live counts for admission."""

from __future__ import annotations

import asyncio
import copy
import math
from typing import Any

import pytest

from facade.index import IndexSettings, SandboxIndex, WaitAborted, pod_indexers
from kube.cache import Cache, Obj, object_key
from kube.informer import EventHandler
from tests.support.pods import sandbox_pod as pod
from tests.support.wait import wait_until_async


class FeedInformer:
    """The part of Informer the index uses: a Cache and handlers told of every change."""

    def __init__(self, indexers: Any = None) -> None:
        self.cache = Cache(indexers)
        self.handlers: list[EventHandler] = []

    def add_handler(self, handler: EventHandler) -> None:
        self.handlers.append(handler)

    def upsert(self, obj: Obj) -> None:
        old = self.cache.upsert(obj)
        for h in self.handlers:
            h.on_add(obj) if old is None else h.on_update(old, obj)

    def delete(self, obj: Obj) -> None:
        self.cache.remove(object_key(obj))
        for h in self.handlers:
            h.on_delete(obj)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def feeds() -> tuple[SandboxIndex, FeedInformer, FeedInformer, Clock]:
    clock = Clock()
    index = SandboxIndex(IndexSettings(provisional_s=5, tombstone_s=60), clock)
    pods, events = FeedInformer(pod_indexers()), FeedInformer()
    index.attach("ns", pods, events)  # type: ignore[arg-type]
    return index, pods, events, clock


def test_read_your_writes_then_watch_data_wins(feeds: Any) -> None:
    index, pods, _, clock = feeds
    index.note_created(pod())
    assert index.get("ns", "sb-1").state == "pending" and index.live("ns") == 1
    pods.upsert(pod(node="n1", phase="Running", ready=True))
    assert index.get("ns", "sb-1").state == "ready" and index.live("ns") == 1
    clock.now += 10
    index.expire()
    assert index.get("ns", "sb-1").state == "ready"


def test_noting_a_create_answers_the_sandbox_as_a_read_would(feeds: Any) -> None:
    """What the pod writer answers a create with: the noted pod's sandbox, or — the watch
    having the sandbox already — the watch's newest attempt, never a stale answer."""
    index, pods, _, _ = feeds
    assert index.note_created(pod()) == index.get("ns", "sb-1")
    pods.upsert(pod(node="n1", phase="Running", ready=True))
    pods.upsert(pod(attempt=1, node="n2"))
    noted = index.note_created(pod())  # a retry of the first create, found there
    assert noted == index.get("ns", "sb-1") and (noted.attempt, noted.node) == (1, "n2")
    assert index.live("ns") == 2  # no provisional entry beside the watched pods


def test_provisional_entry_expires_if_never_seen(feeds: Any) -> None:
    index, _, _, clock = feeds
    index.note_created(pod())
    clock.now += 6
    assert index.get("ns", "sb-1") is None
    index.expire()
    assert index.live("ns") == 0


def test_the_newest_attempt_speaks_for_the_sandbox(feeds: Any) -> None:
    index, pods, _, _ = feeds
    pods.upsert(pod(node="n1", phase="Failed", reason="OutOfcpu"))
    assert index.get("ns", "sb-1").reason == "admission_rejected"
    replacement = pod(node="n2", phase="Running", ready=True, attempt=1)
    replacement["metadata"]["uid"] = "u2"
    pods.upsert(replacement)
    assert index.get("ns", "sb-1").state == "ready" and index.get("ns", "sb-1").attempt == 1
    assert index.sandbox_ids("ns") == ["sb-1"] and index.sandbox_ids("ns", "run-1") == ["sb-1"]


def test_collected_sandbox_leaves_a_tombstone_with_the_collectors_reason(feeds: Any) -> None:
    index, pods, events, clock = feeds
    ready = pod(node="n1", phase="Running", ready=True)
    pods.upsert(ready)
    pods.delete(ready)
    assert index.get("ns", "sb-1").state == "terminated"
    events.upsert(
        {
            "metadata": {"name": "e1", "namespace": "ns"},
            "involvedObject": {"uid": "u1", "namespace": "ns"},
            "reason": "SandboxDeleted",
            "message": "deleted by the sandbox garbage collector: node-gone",
        }
    )
    assert index.get("ns", "sb-1").reason == "node_lost"
    clock.now += 61
    index.expire()
    assert index.get("ns", "sb-1") is None


def test_released_sandbox_is_simply_gone(feeds: Any) -> None:
    index, pods, _, _ = feeds
    ready = pod(node="n1", phase="Running", ready=True)
    pods.upsert(ready)
    index.note_released("ns", "sb-1")
    pods.delete(ready)
    assert index.get("ns", "sb-1") is None


def test_unschedulable_event_reaches_the_sandbox(feeds: Any) -> None:
    index, pods, events, _ = feeds
    pods.upsert(pod())
    events.upsert(
        {
            "metadata": {"name": "e2", "namespace": "ns"},
            "involvedObject": {"uid": "u1", "namespace": "ns"},
            "reason": "FailedScheduling",
            "message": "0/3 nodes are available: 3 Insufficient cpu.",
        }
    )
    sandbox = index.get("ns", "sb-1")
    assert (sandbox.reason, sandbox.message) == (
        "unschedulable",
        "0/3 nodes are available: 3 Insufficient cpu.",
    )


def waiting(index: SandboxIndex, sid: str) -> bool:
    """A wait on ``sid`` is parked on an event nothing has set yet."""
    events = index._waiters.get(("ns", sid), [])
    return bool(events) and not any(e.is_set() for e in events)


@pytest.mark.anyio
async def test_wait_is_resolved_by_the_event_that_makes_it_true(feeds: Any) -> None:
    index, pods, _, _ = feeds
    pods.upsert(pod())
    waiter = asyncio.create_task(index.wait("ns", "sb-1", frozenset({"ready"}), 5.0))
    await wait_until_async(lambda: waiting(index, "sb-1"))
    pods.upsert(pod(node="n1"))  # wakes the waiter: "starting" is not what it waits for

    def waiting_again() -> bool:
        if waiter.done():
            pytest.fail(f"resolved by an event that does not make it true: {waiter.result()}")
        return waiting(index, "sb-1")

    await wait_until_async(waiting_again)
    assert not waiter.done()
    pods.upsert(pod(node="n1", phase="Running", ready=True))
    async with asyncio.timeout(1):
        assert (await waiter).state == "ready"


@pytest.mark.anyio
async def test_wait_returns_current_state_at_timeout_and_final_states_at_once(
    feeds: Any,
) -> None:
    index, pods, _, _ = feeds
    pods.upsert(pod())
    index._clock = lambda: asyncio.get_running_loop().time()  # real time for the timeout
    assert (await index.wait("ns", "sb-1", frozenset({"ready"}), 0.05)).state == "pending"
    failed = copy.deepcopy(pod(node="n1", phase="Failed"))
    pods.upsert(failed)
    assert (await index.wait("ns", "sb-1", frozenset({"ready"}), 5)).state == "failed"


@pytest.mark.anyio
async def test_wait_for_an_unknown_id_gives_up_after_the_grace_but_sees_late_arrivals(
    feeds: Any,
) -> None:
    index, pods, _, _ = feeds
    loop = asyncio.get_running_loop()
    index._clock = loop.time
    index.settings = IndexSettings(unknown_grace_s=0.1)
    started = loop.time()
    assert await index.wait("ns", "sb-typo", frozenset({"ready"}), 30) is None
    assert loop.time() - started < 1
    late = asyncio.create_task(index.wait("ns", "sb-1", frozenset({"ready"}), 30))
    await wait_until_async(lambda: waiting(index, "sb-1"))
    pods.upsert(pod(node="n1", phase="Running", ready=True))  # another replica's create
    async with asyncio.timeout(1):
        assert (await late).state == "ready"


def test_a_released_sandbox_reads_releasing_before_the_watch_says_so(feeds: Any) -> None:
    index, pods, _, _ = feeds
    pods.upsert(pod(node="n1", phase="Running", ready=True))
    index.note_released("ns", "sb-1")
    assert index.get("ns", "sb-1").state == "releasing"
    index.note_created(pod())  # the same key used again after the release: a new sandbox
    assert index.get("ns", "sb-1").state == "ready"


def test_a_sandbox_lost_with_its_node_says_so_in_either_order(feeds: Any) -> None:
    index, pods, _, _ = feeds
    nodes = FeedInformer()
    nodes.synced = asyncio.Event()  # type: ignore[attr-defined]
    nodes.synced.set()  # type: ignore[attr-defined]
    index.attach_nodes(nodes)  # type: ignore[arg-type]
    node = {"metadata": {"name": "n1"}}
    nodes.cache.upsert(node)
    running = pod(node="n1", phase="Running", ready=True)
    pods.upsert(running)
    nodes.delete(node)  # the node's deletion first, then its pods' ...
    pods.delete(running)
    assert index.get("ns", "sb-1").reason == "node_lost"
    other = pod(node="n2", phase="Running", ready=True)
    other["metadata"]["labels"]["sandman.io/sandbox"] = "sb-2"
    nodes.cache.upsert({"metadata": {"name": "n2"}})
    pods.upsert(other)
    pods.delete(other)  # ... or the pod first (another informer, another order)
    assert index.get("ns", "sb-2").reason == "deleted"
    nodes.delete({"metadata": {"name": "n2"}})
    assert index.get("ns", "sb-2").reason == "node_lost"


@pytest.mark.anyio
@pytest.mark.parametrize("timeout_s", [math.nan, math.inf, -math.inf, -1.0])
async def test_a_wait_needs_a_finite_timeout(feeds: Any, timeout_s: float) -> None:
    """A NaN deadline never passes, and a NaN timer corrupts the loop's timer heap (other
    timers fired seconds late): the index refuses one whatever its caller checked."""
    index, pods, _, _ = feeds
    pods.upsert(pod())
    with pytest.raises(ValueError, match="finite timeout"):
        await index.wait("ns", "sb-1", frozenset({"ready"}), timeout_s)


@pytest.mark.anyio
async def test_close_ends_parked_waits(feeds: Any) -> None:
    index, pods, _, _ = feeds
    pods.upsert(pod())
    parked = asyncio.create_task(index.wait("ns", "sb-1", frozenset({"ready"}), 600.0))
    await wait_until_async(lambda: index._waiters)
    index.close()
    with pytest.raises(WaitAborted):
        await parked
    with pytest.raises(WaitAborted):
        await index.wait("ns", "sb-1", frozenset({"ready"}), 1.0)
