"""Reads at a past revision (paginated lists, ``resourceVersionMatch=Exact``): the store's
current objects with the later events undone are exactly the objects it held then, for any
mix of creates, updates and deletes across kinds and namespaces — or 410 once the history
no longer reaches back."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from simcluster.apiserver.store import Store
from simcluster.errors import Expired

Obj = dict[str, Any]
KEYS, NAMESPACES = ("/configmaps", "/pods"), ("a", "b")
State = dict[str, set[tuple[str, str, str]]]  # key -> {(namespace, name, resourceVersion)}

# A write: (key, namespace, name, delete?).
_writes = st.lists(
    st.tuples(st.sampled_from(KEYS), st.sampled_from(NAMESPACES), st.integers(0, 4), st.booleans()),
    max_size=50,
)


def _state(store: Store) -> State:
    return {
        key: {
            (o["metadata"]["namespace"], o["metadata"]["name"], o["metadata"]["resourceVersion"])
            for o in store.iter(key)
        }
        for key in KEYS
    }


@settings(max_examples=60, deadline=None)
@given(writes=_writes, history=st.integers(5, 60), cut=st.floats(0, 1),
       key=st.sampled_from(KEYS), namespace=st.sampled_from((None, *NAMESPACES)))  # fmt: skip
def test_a_read_at_a_revision_sees_the_objects_of_that_revision(
    writes: list[tuple[str, str, int, bool]],
    history: int,
    cut: float,
    key: str,
    namespace: str | None,
) -> None:
    store = Store(history, window_s=3600)
    states = {store.rv: _state(store)}
    for k, ns, i, delete in writes:
        name, old = f"o{i}", store.get(k, ns, f"o{i}")
        if delete and old is not None:
            store.remove(k, old)
        elif not delete:
            obj = {
                "metadata": {"name": name, "namespace": ns, "resourceVersion": str(store.next_rv())}
            }
            store.put(k, obj, old)
        states[store.rv] = _state(store)
    revisions = sorted(states)
    at = revisions[int(cut * (len(revisions) - 1))]
    try:
        seen = store.iter_at(key, namespace, at)
    except Expired:
        assert at < store.compacted
        return
    got = {(o["metadata"]["namespace"], o["metadata"]["name"], o["metadata"]["resourceVersion"])
           for o in seen}  # fmt: skip
    assert got == {x for x in states[at][key] if namespace is None or x[0] == namespace}
