"""The claim book (controller/claim_book.py): a pool pod is handed to at most one claim,
ever — over any interleaving of pool pods arriving and turning Ready, claims taken and
written (or failing), their watch events arriving late, pods released, claims collected,
slots re-created under the same name, unhealthy nodes, and leader changes mid-claim.

The property test keeps the API server's side as the truth (the pods that exist, the claims
written) and lets a leader's book be rebuilt from it at any point, as a new leader's is;
every claim write in flight when the leader changes either lands or not (the hand-over wait
of controller/claims.py makes it one or the other before the new leader serves)."""

from __future__ import annotations

from typing import Any

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from controller.claim_book import ClaimBook, pod_ready, pool_key
from kube.contract import LABEL_CLASS
from kube.pool_contract import LABEL_POOL, LABEL_STANDING

NS, IMAGE, CLASS = "team-a", "python:3.12", "small"
KEY = (NS, IMAGE, CLASS)
SLOTS = 3


def _pod(name: str, *, ready: bool, node: str = "n1", image: str = IMAGE) -> dict[str, Any]:
    conditions = [{"type": "Ready", "status": "True" if ready else "False"}]
    return {
        "metadata": {
            "namespace": NS,
            "name": name,
            "labels": {LABEL_POOL: "prep-1", LABEL_CLASS: CLASS},
        },
        "spec": {"nodeName": node, "containers": [{"name": "sandbox", "image": image}]},
        "status": {"phase": "Running", "conditions": conditions},
    }


def test_announced_pods_are_offered_before_a_standing_pools() -> None:
    """An announced pod goes when its announcement ends; a standing pool refills what it
    gives: claims take the announced ones first, each kind oldest first."""
    book = ClaimBook()
    for name, standing in (("s1", True), ("a1", False), ("s2", True), ("a2", False)):
        pod = _pod(name, ready=True)
        if standing:
            pod["metadata"]["labels"] |= {LABEL_POOL: "standing-x", LABEL_STANDING: "true"}
        book.pod_seen(pod)
    assert book.available(KEY) == ["a1", "a2", "s1", "s2"]
    assert book.take(KEY, 3, "claim-1") == ["a1", "a2", "s1"]
    assert book.pool_of(KEY, "s1") == "standing-x"


def _claim(name: str, pods: list[str]) -> dict[str, Any]:
    return {"metadata": {"namespace": NS, "name": name}, "spec": {"pods": pods}}


def test_only_ready_pods_on_good_nodes_are_offered_oldest_first() -> None:
    cordoned = {"n2"}
    book = ClaimBook(node_ok=lambda node: node not in cordoned)
    book.pod_seen(_pod("a", ready=True))
    book.pod_seen(_pod("b", ready=False))
    book.pod_seen(_pod("c", ready=True, node="n2"))
    book.pod_seen(_pod("d", ready=True))
    gone = _pod("e", ready=True)
    gone["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    book.pod_seen(gone)
    assert book.available(KEY) == ["a", "d"]
    assert book.counts(KEY) == {"ready": 2, "claimed": 0, "held": 0, "not_ready": 3}
    assert book.available((NS, "other:1", CLASS)) == []
    assert pool_key({"metadata": {"name": "x"}}) is None  # not a pool pod
    assert not pod_ready({"metadata": {}, "status": {"phase": "Pending"}})


def test_a_held_pod_is_not_offered_and_a_failed_write_gives_it_back() -> None:
    book = ClaimBook()
    for name in "abc":
        book.pod_seen(_pod(name, ready=True))
    assert book.take(KEY, 2, "claim-1") == ["a", "b"]
    assert book.take(KEY, 5, "claim-2") == ["c"]
    book.settle(NS, "claim-1", ["a", "b"], written=False)
    book.settle(NS, "claim-2", ["c"], written=True)
    assert book.available(KEY) == ["a", "b"]
    assert book.claim_of(NS, "claim-2") == ("c",)
    assert book.is_claimed(NS, "c")


def test_a_claimed_name_stays_spent_while_its_claim_exists() -> None:
    book = ClaimBook()
    book.pod_seen(_pod("a", ready=True))
    book.claim_seen(_claim("claim-1", ["a"]))
    book.pod_gone(_pod("a", ready=True))
    book.pod_seen(_pod("a", ready=True))  # the slot re-created under the same name
    assert book.available(KEY) == []
    book.claim_gone(_claim("claim-1", ["a"]))
    assert book.available(KEY) == []  # the pod exists: still claimed
    book.pod_gone(_pod("a", ready=True))
    assert not book.is_claimed(NS, "a")


class Interleavings(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        #: The API server: pods (name -> ready) and written claims (name -> pods).
        self.pods: dict[str, bool] = {}
        self.claims: dict[str, list[str]] = {}
        #: Every (pod name, claim) ever written: the invariant's record.
        self.handed: dict[str, str] = {}
        self.book = ClaimBook()
        self.in_flight: dict[str, list[str]] = {}
        self.unseen: list[str] = []  # written claims whose watch event is still to come
        self.serial = 0
        self.ended = False

    def _write(self, claim: str, pods: list[str]) -> None:
        for pod in pods:
            assert pod not in self.handed, f"{pod} handed to {self.handed[pod]} and {claim}"
            self.handed[pod] = claim
        self.claims[claim] = pods

    @rule(slot=st.integers(0, SLOTS - 1), ready=st.booleans())
    def pod_created_or_changed(self, slot: int, ready: bool) -> None:
        """The filler (re-)creates a slot the book does not call claimed, until the
        announcement ends; the kubelet flips readiness."""
        name = f"pod-{slot}"
        if name not in self.pods and (self.ended or self.book.is_claimed(NS, name)):
            return
        self.pods[name] = ready
        self.book.pod_seen(_pod(name, ready=ready))

    @rule(slot=st.integers(0, SLOTS - 1))
    def pod_deleted(self, slot: int) -> None:
        name = f"pod-{slot}"
        if self.pods.pop(name, None) is not None:
            self.book.pod_gone(_pod(name, ready=False))

    @rule(count=st.integers(1, 4))
    def claim_taken(self, count: int) -> None:
        self.serial += 1
        claim = f"claim-{self.serial}"
        picked = self.book.take(KEY, count, claim)
        for pod in picked:
            assert self.pods.get(pod), f"{pod} offered while not Ready or gone"
        if picked:
            self.in_flight[claim] = picked

    @precondition(lambda self: bool(self.in_flight))
    @rule(data=st.data(), lands=st.booleans())
    def write_ends(self, data: st.DataObject, lands: bool) -> None:
        claim = data.draw(st.sampled_from(sorted(self.in_flight)))
        pods = self.in_flight.pop(claim)
        if lands:
            self._write(claim, pods)
            self.unseen.append(claim)
        self.book.settle(NS, claim, pods, written=lands)

    @precondition(lambda self: bool(self.unseen))
    @rule()
    def claim_event_arrives(self) -> None:
        claim = self.unseen.pop(0)
        if claim in self.claims:
            self.book.claim_seen(_claim(claim, self.claims[claim]))

    @rule()
    def announcement_ends(self) -> None:
        self.ended = True

    @precondition(lambda self: self.ended and bool(self.claims))
    @rule(data=st.data())
    def claim_collected(self, data: st.DataObject) -> None:
        """The collector deletes a claim whose pods are all gone and whose announcement
        ended (while it lives, the claim keeps its slots' names spent)."""
        gone = [c for c, pods in self.claims.items() if not any(p in self.pods for p in pods)]
        if gone:
            claim = data.draw(st.sampled_from(sorted(gone)))
            self.book.claim_gone(_claim(claim, self.claims.pop(claim)))

    @rule(landed=st.lists(st.booleans(), max_size=4))
    def leader_changes(self, landed: list[bool]) -> None:
        """In-flight writes land or not; the new leader's book is built from the server."""
        for (claim, pods), lands in zip(sorted(self.in_flight.items()), landed, strict=False):
            if lands:
                self._write(claim, pods)
        self.in_flight.clear()
        self.unseen.clear()
        self.book = ClaimBook()
        for name, ready in self.pods.items():
            self.book.pod_seen(_pod(name, ready=ready))
        for claim, pods in self.claims.items():
            self.book.claim_seen(_claim(claim, pods))

    @invariant()
    def nothing_claimed_is_offered(self) -> None:
        for pod in self.book.available(KEY):
            assert pod not in self.handed or self.handed[pod] not in self.claims, pod


Interleavings.TestCase.settings = settings(max_examples=300, stateful_step_count=30, deadline=None)
TestInterleavings = Interleavings.TestCase
