"""The store's history index: a watcher pinned to ``spec.nodeName`` (a kubelet) resumes by
replaying its own node's events, and gets exactly what an unbroken watch would have.

Why it matters: the fault benchmark drops every watch every 3 s; 400 kubelets each matching
every event since their resourceVersion took seconds of the server's loop per drop, and the
burst's binds and status writes waited behind it (docs/benchmarks/faults-soak.md,
"Faults")."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from simcluster.apiserver.selectors import FieldSelector, LabelSelector
from simcluster.apiserver.store import Event, Store, Watcher
from simcluster.errors import Expired

Obj = dict[str, Any]
NODES = ("", "n0", "n1", "n2")


def _watcher(node: str) -> Watcher:
    return Watcher(
        "pods", None, LabelSelector(), FieldSelector((("spec.nodeName", True, node),)), True
    )


def _lines(w: Watcher) -> list[bytes]:
    out = []
    while not w.queue.empty():
        line = w.queue.get_nowait()
        assert line is not None
        out.append(line)
    return out


def _pod(store: Store, name: str, node: str) -> Obj:
    return {
        "metadata": {"name": name, "namespace": "t", "resourceVersion": str(store.next_rv())},
        "spec": {"nodeName": node},
    }


@dataclass(eq=False)
class _CountingWatcher(Watcher):
    """A watcher that counts the events it was offered (the replay's work)."""

    offered: int = 0

    def offer(self, event: Event) -> None:
        self.offered += 1
        super().offer(event)


# A write: (pod index, node index or None to delete).
_writes = st.lists(st.tuples(st.integers(0, 5), st.one_of(st.none(), st.integers(0, 3))),
                   max_size=60)  # fmt: skip


@settings(max_examples=60, deadline=None, derandomize=True)
@given(writes=_writes, history=st.integers(5, 80), node=st.sampled_from(NODES),
       cut=st.floats(0, 1))  # fmt: skip
def test_a_resumed_pinned_watch_gets_what_an_unbroken_one_got_after_its_revision(
    writes: list[tuple[int, int | None]], history: int, node: str, cut: float
) -> None:
    store = Store(history)
    live = _watcher(node)
    store.subscribe(live, None)
    objs: dict[str, Obj] = {}
    revisions = [store.rv]
    for i, n in writes:
        name, old = f"p{i}", objs.get(f"p{i}")
        if n is None:
            if old is not None:
                store.remove("pods", objs.pop(name))
        else:
            objs[name] = _pod(store, name, NODES[n])
            store.put("pods", objs[name], old)
        revisions.append(store.rv)
    since = revisions[int(cut * (len(revisions) - 1))]
    lines = _lines(live)
    resumed = _watcher(node)
    try:
        store.subscribe(resumed, since)
    except Expired:
        assert since < store.compacted
        return
    expected = [x for x in lines if _rv_of(x) > since]
    assert _lines(resumed) == expected


def _rv_of(line: bytes) -> int:
    return int(json.loads(line)["object"]["metadata"]["resourceVersion"])


def test_a_kubelet_resume_looks_only_at_its_own_nodes_events() -> None:
    store = Store(100_000)
    for k in range(2_000):  # a burst on 400 nodes, then the leases' traffic
        store.put("pods", _pod(store, f"sb{k}", f"n{k % 400}"), None)
    for k in range(2_000):
        store.put("leases", _pod(store, f"l{k}", ""), None)
    resumed = _CountingWatcher("pods", None, LabelSelector(),
                               FieldSelector((("spec.nodeName", True, "n7"),)), True)  # fmt: skip
    store.subscribe(resumed, 0)
    assert len(_lines(resumed)) == 5
    assert resumed.offered == 5  # not the 4,000 events since revision 0


def test_the_history_index_is_compacted_with_the_history() -> None:
    store = Store(10)
    for k in range(1_000):
        store.put("pods", _pod(store, f"p{k}", f"n{k}"), None)
    watcher = _watcher("n995")
    store.subscribe(watcher, store.compacted)
    assert len(_lines(watcher)) == 1
    assert len(store._history_by) <= 10  # one entry per node still in the history
