"""The leader's book of pool pods and their claims: which may be handed out, no I/O.

Why a book of its own: "a pool pod is handed to at most one request, ever" is the pool's
first invariant, and it must hold across facade replicas, retries and a leader change. The
book is the one place that decides it, fed from two watches (pool pods, SandboxClaims) and
from the leader's own claims in flight, so it can be driven by a property test over any
interleaving (tests/controller/test_claim_book.py) without a cluster.

What it knows:

- **pool pods** per (namespace, image, class), in the order they arrived (the oldest are
  handed out first: they have waited longest), announced ones before a standing pool's
  (``sandman.io/standing``): an announced pod is deleted when its announcement ends, so
  handing it out first wastes none of what was created for the step, while a standing pool
  refills what it gives and keeps its pods for the next step;
- **claimed pods**: every pod name a SandboxClaim names, from the claims' watch, and those
  of the claims this leader wrote before the watch showed them (:meth:`settle`) — kept
  while the claim exists, even once the pod is gone (a deterministic slot name a claim
  spent is never offered again), and while the pod exists, even once the claim is gone;
- **held pods**: picked for a claim whose write is in flight (:meth:`take`): not offered to
  another request meanwhile, released if the write fails.

A pod is offered only when it is Ready, not being deleted, on a node that is there and
schedulable (``node_ok``), and neither claimed nor held. A pod once claimed stays claimed
for as long as it exists — even if its claim object is deleted before it — so nothing
released or claimed ever goes back to a pool. A new leader builds its book from the watches
(and one fresh list of the claims, controller/claims.py) before it serves: its predecessor's
holds die with it, and what it wrote is in the claims it reads.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from kube.cache import Obj
from kube.contract import LABEL_CLASS
from kube.pool_contract import LABEL_POOL, LABEL_STANDING

__all__ = ["ClaimBook", "PoolKey", "pod_ready", "pool_key"]

#: (namespace, image, class): the pods one claim may take from.
PoolKey = tuple[str, str, str]


def pool_key(pod: Obj) -> PoolKey | None:
    """The pool a pod belongs to, None for a pod that is no pool pod."""
    meta = pod.get("metadata") or {}
    labels = meta.get("labels") or {}
    if not labels.get(LABEL_POOL):
        return None
    containers = (pod.get("spec") or {}).get("containers") or [{}]
    image = str(containers[0].get("image") or "")
    return (str(meta.get("namespace") or ""), image, str(labels.get(LABEL_CLASS) or ""))


def pod_ready(pod: Obj) -> bool:
    """Running and Ready (the daemon answers its probe), not being deleted."""
    if (pod.get("metadata") or {}).get("deletionTimestamp"):
        return False
    status = pod.get("status") or {}
    if status.get("phase") != "Running":
        return False
    return any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in status.get("conditions") or ()
    )


@dataclass(slots=True)
class _PoolPod:
    name: str
    node: str
    ready: bool
    pool: str
    standing: bool = False


class ClaimBook:
    """``pod_seen``/``pod_gone`` and ``claim_seen``/``claim_gone`` from the watches;
    ``take`` then ``settle`` for each claim the leader writes."""

    def __init__(self, node_ok: Callable[[str], bool] = lambda _node: True) -> None:
        self._node_ok = node_ok
        self._pools: dict[PoolKey, dict[str, _PoolPod]] = {}
        #: ``namespace/pod`` -> ``namespace/claim`` of every claimed pod.
        self._claimed: dict[str, str] = {}
        #: ``namespace/claim`` -> its pods (watched, or written by this leader).
        self._claims: dict[str, tuple[str, ...]] = {}
        #: ``namespace/pod`` -> ``namespace/claim`` whose write is in flight.
        self._held: dict[str, str] = {}
        #: ``namespace/pod`` of every pool pod in the watch.
        self._live: set[str] = set()

    # --- the watches --------------------------------------------------------------------
    def pod_seen(self, pod: Obj) -> None:
        key = pool_key(pod)
        if key is None:
            return
        meta, spec = pod["metadata"], pod.get("spec") or {}
        labels = meta.get("labels") or {}
        pool, standing = str(labels.get(LABEL_POOL)), labels.get(LABEL_STANDING) == "true"
        name, node = str(meta.get("name")), str(spec.get("nodeName") or "")
        entry = _PoolPod(name, node, pod_ready(pod), pool, standing)
        self._pools.setdefault(key, {})[entry.name] = entry
        self._live.add(f"{key[0]}/{entry.name}")

    def pod_gone(self, pod: Obj) -> None:
        key = pool_key(pod)
        if key is None:
            return
        name = str(pod["metadata"].get("name"))
        pods = self._pools.get(key, {})
        pods.pop(name, None)
        if not pods:
            self._pools.pop(key, None)
        self._live.discard(f"{key[0]}/{name}")
        claim = self._claimed.get(f"{key[0]}/{name}")
        if claim is not None and claim not in self._claims:
            self._claimed.pop(f"{key[0]}/{name}")  # its claim went before it

    def claim_seen(self, claim: Obj) -> None:
        meta = claim.get("metadata") or {}
        ns = str(meta.get("namespace") or "")
        pods = (claim.get("spec") or {}).get("pods") or ()
        self._record(f"{ns}/{meta.get('name')}", ns, [str(p) for p in pods])

    def claim_gone(self, claim: Obj) -> None:
        """The claim object is gone; its pods stay claimed while they exist (a pod's name
        stays spent while its claim exists, even after the pod is gone)."""
        meta = claim.get("metadata") or {}
        ns = str(meta.get("namespace") or "")
        key = f"{ns}/{meta.get('name')}"
        for name in self._claims.pop(key, ()):
            pod = f"{ns}/{name}"
            if pod not in self._live and self._claimed.get(pod) == key:
                del self._claimed[pod]

    # --- claims -------------------------------------------------------------------------
    def claim_of(self, namespace: str, claim: str) -> tuple[str, ...] | None:
        """The pods of a claim this book knows (a retry's answer), None if unknown."""
        return self._claims.get(f"{namespace}/{claim}")

    def pool_of(self, key: PoolKey, pod: str) -> str:
        """The announcement a pool pod of ``key`` was created for ("" if unknown)."""
        entry = self._pools.get(key, {}).get(pod)
        return entry.pool if entry is not None else ""

    def is_claimed(self, namespace: str, pod: str) -> bool:
        return f"{namespace}/{pod}" in self._claimed

    def available(self, key: PoolKey) -> list[str]:
        """The pods a claim on ``key`` could take now: announced ones first, oldest first."""
        ns = key[0]
        found = [
            p
            for p in self._pools.get(key, {}).values()
            if p.ready
            and f"{ns}/{p.name}" not in self._claimed
            and f"{ns}/{p.name}" not in self._held
            and self._node_ok(p.node)
        ]
        return [p.name for p in sorted(found, key=lambda p: p.standing)]

    def counts(self, key: PoolKey) -> dict[str, int]:
        """Pool pods by state: ready (offered), claimed, held, not_ready (starting or
        unhealthy)."""
        ns, out = key[0], {"ready": 0, "claimed": 0, "held": 0, "not_ready": 0}
        for p in self._pools.get(key, {}).values():
            k = f"{ns}/{p.name}"
            if k in self._claimed:
                out["claimed"] += 1
            elif k in self._held:
                out["held"] += 1
            elif p.ready and self._node_ok(p.node):
                out["ready"] += 1
            else:
                out["not_ready"] += 1
        return out

    def take(self, key: PoolKey, count: int, claim: str) -> list[str]:
        """Hold up to ``count`` available pods of ``key`` for ``claim`` (its write follows)."""
        picked = self.available(key)[: max(0, count)]
        for name in picked:
            self._held[f"{key[0]}/{name}"] = f"{key[0]}/{claim}"
        return picked

    def settle(self, namespace: str, claim: str, pods: Iterable[str], *, written: bool) -> None:
        """The write of ``claim`` holding ``pods`` ended: written (claimed from now on,
        whatever the watch says later) or not (the pods are offered again)."""
        names = list(pods)
        for name in names:
            self._held.pop(f"{namespace}/{name}", None)
        if written:
            self._record(f"{namespace}/{claim}", namespace, names)

    def release_holds(self) -> None:
        """Leadership lost: holds of writes that never ended are forgotten (the next leader
        reads what was written)."""
        self._held.clear()

    def _record(self, claim_key: str, namespace: str, pods: list[str]) -> None:
        self._claims[claim_key] = tuple(pods)
        for name in pods:
            self._claimed[f"{namespace}/{name}"] = claim_key
