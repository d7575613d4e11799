"""A claimed pool sandbox's life on the controller's side: its expiry, idle timeout and owner
are its SandboxClaim's, and the claim goes once its pods have.

Why a module of its own: a claim costs one API write per batch (controller/claims.py), so
nothing of the request is written on the pods themselves — a pool pod's own expiry
annotation is its *announcement's* (an unclaimed pool pod is deleted with it), and it has no
owner label. The garbage collector (controller/collector.py) must therefore read a claimed
pod's deadline, idle timeout and owner from the claim that names it, or a claimed sandbox
would live as long as its pool and survive its owner. This module joins the two from the
claims' watch (the claim service's informer, which every replica runs):

- :meth:`ClaimedPods.expires_at` / :meth:`idle_timeout`: the claim's, for a pod a claim
  names; the pod's own annotation otherwise. A claim that appears or changes reschedules its
  pods' deadlines (``on_change``).
- :meth:`ClaimedPods.owner_selectors`: the label selectors that name an owner's claimed pods
  (``sandman.io/sandbox in (...)``, at most :data:`NAMES_PER_SELECTOR` names each): an
  expired owner's claimed sandboxes go with a handful of deletecollections, like its cold
  ones (controller/owners.py).
- :meth:`ClaimedPods.spent`: claims none of whose pods has been in the caches for
  ``grace_s``: the collector deletes them, so nothing lingers. The grace covers the watch's
  lag behind a fresh claim and an Idempotency-Key retry's window (a retry that finds its
  claim gets its pods back; once the claim is gone a retry creates anew, as for a released
  cold sandbox).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import msgspec

from kube.cache import Obj
from kube.contract import LABEL_SANDBOX
from kube.informer import Handlers, Informer
from kube.pool_contract import ClaimSpec

__all__ = ["NAMES_PER_SELECTOR", "ClaimedPods"]

#: Pod names per ``in (...)`` selector: ~4 KiB of query string, well inside any URL limit.
NAMES_PER_SELECTOR = 100


class ClaimedPods:
    """Claims by pod, from the claims' informer; ``pods_known(namespace, name)`` tells
    whether a pod is in the controller's caches."""

    def __init__(
        self,
        informer: Informer,
        pods_known: Callable[[str, str], bool],
        *,
        grace_s: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.informer = informer
        self._pods_known = pods_known
        self._grace_s = grace_s
        self._clock = clock
        #: Called with (namespace, pod names) when a claim naming them appears, changes, goes.
        self.on_change: Callable[[str, list[str]], None] = lambda _ns, _pods: None
        self._claims: dict[tuple[str, str], ClaimSpec] = {}
        self._pod_claim: dict[tuple[str, str], str] = {}
        #: (namespace, claim) -> when it was first seen with none of its pods cached.
        self._empty_since: dict[tuple[str, str], float] = {}
        informer.add_handler(
            Handlers(add=self._seen, update=lambda _old, new: self._seen(new), delete=self._gone)
        )

    # --- reads ----------------------------------------------------------------------------
    def of(self, pod: Obj) -> ClaimSpec | None:
        meta = pod.get("metadata") or {}
        key = (str(meta.get("namespace") or ""), str(meta.get("name") or ""))
        name = self._pod_claim.get(key)
        return None if name is None else self._claims.get((key[0], name))

    def expires_at(self, pod: Obj, annotation: str) -> str | None:
        """The time a pod expires at (RFC 3339): its claim's, else its own annotation."""
        claim = self.of(pod)
        if claim is not None:
            return claim.expires_at
        return (pod["metadata"].get("annotations") or {}).get(annotation)

    def idle_timeout(self, pod: Obj, annotation: str) -> bool:
        """Whether the pod had an idle timeout: its claim's, else its own annotation."""
        claim = self.of(pod)
        if claim is not None:
            return bool(claim.idle_timeout_s)
        return bool((pod["metadata"].get("annotations") or {}).get(annotation))

    def owner_selectors(self, namespace: str, owner: str) -> list[str]:
        """Label selectors naming every pod the owner's claims in ``namespace`` hold."""
        names = sorted(
            pod
            for (ns, _), spec in self._claims.items()
            if ns == namespace and spec.owner == owner
            for pod in spec.pods
        )
        return [
            f"{LABEL_SANDBOX} in ({','.join(names[i : i + NAMES_PER_SELECTOR])})"
            for i in range(0, len(names), NAMES_PER_SELECTOR)
        ]

    def spent(self) -> Iterator[tuple[str, str]]:
        """(namespace, claim) of the claims none of whose pods has been cached for
        ``grace_s`` (the caller deletes them)."""
        now = self._clock()
        for key, spec in list(self._claims.items()):
            if any(self._pods_known(key[0], pod) for pod in spec.pods):
                self._empty_since.pop(key, None)
                continue
            since = self._empty_since.setdefault(key, now)
            if now - since >= self._grace_s:
                yield key

    # --- watch events ---------------------------------------------------------------------
    def _seen(self, obj: Obj) -> None:
        meta = obj.get("metadata") or {}
        key = (str(meta.get("namespace") or ""), str(meta.get("name") or ""))
        try:
            spec = msgspec.convert(obj.get("spec") or {}, ClaimSpec)
        except msgspec.ValidationError:
            return
        self._drop(key)
        self._claims[key] = spec
        for pod in spec.pods:
            self._pod_claim[(key[0], pod)] = key[1]
        self.on_change(key[0], list(spec.pods))

    def _gone(self, obj: Obj) -> None:
        meta = obj.get("metadata") or {}
        self._drop((str(meta.get("namespace") or ""), str(meta.get("name") or "")))

    def _drop(self, key: tuple[str, str]) -> None:
        old = self._claims.pop(key, None)
        self._empty_since.pop(key, None)
        if old is None:
            return
        for pod in old.pods:
            if self._pod_claim.get((key[0], pod)) == key[1]:
                del self._pod_claim[(key[0], pod)]
        self.on_change(key[0], list(old.pods))
