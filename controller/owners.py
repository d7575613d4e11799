"""Owner-lease expiry: a trainer that stops renewing its Lease loses all its sandboxes.

Why a Lease: a trainer (through the SDK) holds hundreds of sandboxes; if it crashes, they
must not wait for their TTLs. The SDK keeps a ``coordination.k8s.io/v1`` Lease labelled
``sandman.io/owner: <owner>`` renewed for the run, and labels every sandbox of the run with
the same ``sandman.io/owner`` value. When the Lease expires, one ``deletecollection`` by that
label removes the owner's sandboxes in the Lease's namespace, and one more its image
announcements (``ImagePreparation`` objects the facade labelled with the owner): a crashed
trainer's images stop being prepared within one lease duration, not their ``ttl_s``.

A claimed pool sandbox carries its owner in its SandboxClaim, not a label
(controller/claim_life.py): its pods go with one more deletecollection per 100 of them, by
name (``sandman.io/sandbox in (...)``).

Expiry is judged like leader election judges it: by when *this* controller last saw the
Lease's spec change plus ``leaseDurationSeconds``, on its own monotonic clock — never by
comparing the trainer's wall clock with ours. Every replica observes (warm after failover); a
controller that just started waits one full duration before it can call a Lease expired. A
Lease is collected once per resourceVersion; renewing it makes it live again.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from controller.claim_life import ClaimedPods
from controller.view import ClusterView
from kube import PODS, KubeClient, NotFound
from kube.cache import Obj, object_key
from kube.informer import Handlers
from kube.preparation_contract import IMAGE_PREPARATIONS

__all__ = ["OwnerLeases"]


class OwnerLeases:
    def __init__(
        self,
        view: ClusterView,
        *,
        clock: Callable[[], float] = time.monotonic,
        claimed: ClaimedPods | None = None,
    ) -> None:
        self.view = view
        self.claimed = claimed
        self._clock = clock
        self._observed: dict[str, tuple[Any, float]] = {}  # key -> (spec, observed at)
        self._collected: dict[str, str] = {}  # key -> resourceVersion collected
        view.owner_leases.add_handler(
            Handlers(
                add=self._observe, update=lambda _o, new: self._observe(new), delete=self._gone
            )
        )

    def _observe(self, lease: Obj) -> None:
        key = object_key(lease)
        spec = lease.get("spec") or {}
        seen = self._observed.get(key)
        if seen is None or seen[0] != spec:
            self._observed[key] = (spec, self._clock())

    def _gone(self, lease: Obj) -> None:
        key = object_key(lease)
        self._observed.pop(key, None)
        self._collected.pop(key, None)

    def expired(self) -> list[tuple[Obj, str]]:
        """(lease, owner) for every owner Lease past its duration, not yet collected."""
        now = self._clock()
        label = self.view.settings.owner_label
        out = []
        for lease in self.view.owner_leases.cache:
            key = object_key(lease)
            rv = lease["metadata"].get("resourceVersion", "")
            seen = self._observed.get(key)
            if seen is None or self._collected.get(key) == rv:
                continue
            spec, at = seen
            duration = float(spec.get("leaseDurationSeconds") or 0)
            owner = (lease["metadata"].get("labels") or {}).get(label)
            if owner and duration > 0 and at + duration <= now:
                out.append((lease, owner))
        return out

    async def collect(self, client: KubeClient, lease: Obj, owner: str) -> tuple[int, int]:
        """Delete ``owner``'s sandboxes and image announcements in the Lease's namespace;
        return how many of each."""
        selector = f"{self.view.settings.owner_label}={owner}"
        ns = lease["metadata"]["namespace"]
        pods = await client.delete_collection(PODS, ns, label_selector=selector)
        count = _count(pods)
        for names in self.claimed.owner_selectors(ns, owner) if self.claimed else ():
            count += _count(await client.delete_collection(PODS, ns, label_selector=names))
        try:
            preps = await client.delete_collection(IMAGE_PREPARATIONS, ns, label_selector=selector)
        except NotFound:
            preps = None  # the CRD is not installed: nothing was announced
        self._collected[object_key(lease)] = lease["metadata"].get("resourceVersion", "")
        return count, _count(preps)


def _count(result: Any) -> int:
    return len((result or {}).get("items") or ())
