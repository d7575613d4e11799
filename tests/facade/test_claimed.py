"""The facade's index of SandboxClaims (facade/claimed.py), driven by watch events and
notes directly (no I/O): whichever order claims appear, change, go and are noted in, a pod
is the sandbox of the claim that names it last, and an owner's pods are its claims' pods."""

from __future__ import annotations

import msgspec
from hypothesis import given, settings
from hypothesis import strategies as st

from facade.claimed import ClaimIndex
from kube.pool_contract import ClaimSpec

NS = "t1"
PODS = [f"pool-{i}" for i in range(4)]
CLAIMS = ["claim-a", "claim-b", "claim-c"]
OWNERS = ["run-1", "run-2"]


def _spec(pods: list[str], owner: str) -> ClaimSpec:
    return ClaimSpec(
        pool="prep-1", image="i", sandbox_class="tiny", pods=pods, request_digest="d", owner=owner
    )


def _obj(name: str, spec: ClaimSpec) -> dict:
    return {"metadata": {"namespace": NS, "name": name}, "spec": msgspec.to_builtins(spec)}


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_a_note_answers_until_the_watch_does_and_expires_unconfirmed() -> None:
    clock, woken = _Clock(), []
    index = ClaimIndex(lambda ns, pods: woken.extend(pods), provisional_s=30, clock=clock)
    index.note(NS, "claim-a", _spec(["pool-0"], "run-1"))
    assert index.of_pod(NS, "pool-0") is not None and woken == ["pool-0"]
    clock.now = 31
    index.expire()
    assert index.of_pod(NS, "pool-0") is None  # no watch confirmed it
    index.note(NS, "claim-a", _spec(["pool-0"], "run-1"))
    index._seen(_obj("claim-a", _spec(["pool-0"], "run-1")))
    clock.now = 100
    index.expire()
    assert index.of_pod(NS, "pool-0") is not None  # watched: kept
    assert index.pods_of_owner(NS, "run-1") == ["pool-0"]
    index._gone(_obj("claim-a", _spec(["pool-0"], "run-1")))
    assert index.of_pod(NS, "pool-0") is None and index.pods_of_owner(NS, "run-1") == []


EVENTS = st.lists(
    st.tuples(
        st.sampled_from(["seen", "gone", "note"]),
        st.sampled_from(CLAIMS),
        st.lists(st.sampled_from(PODS), unique=True, max_size=3),
        st.sampled_from(OWNERS),
    ),
    max_size=25,
)


@settings(max_examples=200, deadline=None)
@given(EVENTS)
def test_the_index_agrees_with_the_claims_it_was_shown(events: list) -> None:
    index = ClaimIndex(provisional_s=1e9)
    model: dict[str, ClaimSpec] = {}
    for kind, name, pods, owner in events:
        spec = _spec(pods, owner)
        if kind == "gone":
            index._gone(_obj(name, spec))
            model.pop(name, None)
        elif kind == "seen":
            index._seen(_obj(name, spec))
            model[name] = spec
        else:
            index.note(NS, name, spec)
            model[name] = spec if name not in model or _noted_only(index, name) else model[name]
    for owner in OWNERS:
        expected = sorted(p for s in model.values() if s.owner == owner for p in s.pods)
        assert sorted(index.pods_of_owner(NS, owner)) == expected
    for name, spec in model.items():
        claimed = index.claim(NS, name)
        assert claimed is not None and claimed.spec == spec


def _noted_only(index: ClaimIndex, name: str) -> bool:
    return (NS, name) in index._noted
