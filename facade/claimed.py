"""The facade's view of SandboxClaims: which pool pods are whose sandboxes, and as what.

Why a module of its own: a claimed pool sandbox is one pod and one record. The pod was
created ahead of any request (kube/pool_contract.py) and carries none of the request's
settings — no owner label, no user labels, the announcement's expiry — because a claim
costs one API write per batch, not a patch per pod. The request's settings live in the
batch's ``SandboxClaim``. The facade's index (facade/index.py) joins the two: a claimed pod
is shown with its claim's owner, labels and expiry, so get, list, wait and release treat it
exactly as a cold sandbox; an unclaimed pool pod is nobody's sandbox and is not shown.

**Read-your-writes**, as for pods: a claim this replica just made is noted before the
claims' watch shows it (:meth:`ClaimIndex.note`), so the create's answer and an immediate
get agree. Watch data always wins over a note, and a note that no watch confirms within
``provisional_s`` is dropped.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import msgspec

from kube.cache import Obj
from kube.informer import Handlers, Informer
from kube.pool_contract import ClaimSpec

__all__ = ["ClaimIndex", "Claimed"]


class Claimed(msgspec.Struct, frozen=True, kw_only=True):
    """One claim as the index keeps it."""

    name: str
    spec: ClaimSpec


class ClaimIndex:
    """``attach`` each tenant namespace's SandboxClaim informer; ``on_change(namespace,
    pods)`` is called with the pods a claim names whenever it appears, changes or goes."""

    def __init__(
        self,
        on_change: Callable[[str, list[str]], None] = lambda _ns, _pods: None,
        *,
        provisional_s: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._on_change = on_change
        self._provisional_s = provisional_s
        self._clock = clock
        #: (namespace, claim name) -> the claim; watched and noted ones.
        self._claims: dict[tuple[str, str], Claimed] = {}
        self._noted: dict[tuple[str, str], float] = {}
        #: (namespace, pod name) -> claim name.
        self._pod_claim: dict[tuple[str, str], str] = {}
        #: (namespace, owner) -> the claims naming it.
        self._by_owner: dict[tuple[str, str], set[str]] = {}

    def attach(self, informer: Informer) -> None:
        informer.add_handler(
            Handlers(
                add=self._seen,
                update=lambda _old, new: self._seen(new),
                delete=self._gone,
            )
        )

    # --- reads ----------------------------------------------------------------------------
    def claim(self, namespace: str, name: str) -> Claimed | None:
        return self._claims.get((namespace, name))

    def of_pod(self, namespace: str, pod: str) -> Claimed | None:
        name = self._pod_claim.get((namespace, pod))
        return None if name is None else self._claims.get((namespace, name))

    def pods_of_owner(self, namespace: str, owner: str) -> list[str]:
        names = self._by_owner.get((namespace, owner), ())
        return [pod for n in names for pod in self._claims[(namespace, n)].spec.pods]

    # --- writes ---------------------------------------------------------------------------
    def note(self, namespace: str, name: str, spec: ClaimSpec) -> None:
        """A claim this replica made (or was answered again), before the watch shows it."""
        key = (namespace, name)
        if key in self._claims and key not in self._noted:
            return  # the watch has it: watch data wins
        self._noted[key] = self._clock()
        self._put(namespace, Claimed(name=name, spec=spec))

    def expire(self) -> None:
        now = self._clock()
        for key, at in list(self._noted.items()):
            if now - at >= self._provisional_s:
                del self._noted[key]
                self._drop(*key)

    # --- watch events ---------------------------------------------------------------------
    def _seen(self, obj: Obj) -> None:
        meta = obj.get("metadata") or {}
        namespace, name = str(meta.get("namespace") or ""), str(meta.get("name") or "")
        try:
            spec = msgspec.convert(obj.get("spec") or {}, ClaimSpec)
        except msgspec.ValidationError:
            return  # not a claim Sandman wrote: it names no sandbox of ours
        self._noted.pop((namespace, name), None)
        self._put(namespace, Claimed(name=name, spec=spec))

    def _gone(self, obj: Obj) -> None:
        meta = obj.get("metadata") or {}
        key = (str(meta.get("namespace") or ""), str(meta.get("name") or ""))
        self._noted.pop(key, None)
        self._drop(*key)

    def _put(self, namespace: str, claimed: Claimed) -> None:
        old = self._claims.get((namespace, claimed.name))
        if old is not None:
            self._unlink(namespace, old)
        self._claims[(namespace, claimed.name)] = claimed
        for pod in claimed.spec.pods:
            self._pod_claim[(namespace, pod)] = claimed.name
        if claimed.spec.owner:
            self._by_owner.setdefault((namespace, claimed.spec.owner), set()).add(claimed.name)
        self._on_change(namespace, list(claimed.spec.pods))

    def _drop(self, namespace: str, name: str) -> None:
        old = self._claims.pop((namespace, name), None)
        if old is not None:
            self._unlink(namespace, old)
            self._on_change(namespace, list(old.spec.pods))

    def _unlink(self, namespace: str, claimed: Claimed) -> None:
        for pod in claimed.spec.pods:
            if self._pod_claim.get((namespace, pod)) == claimed.name:
                del self._pod_claim[(namespace, pod)]
        owner = claimed.spec.owner
        if owner:
            names = self._by_owner.get((namespace, owner))
            if names is not None:
                names.discard(claimed.name)
                if not names:
                    del self._by_owner[(namespace, owner)]
