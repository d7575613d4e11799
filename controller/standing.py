"""Standing pools in the pool filler: the parts that announced pools do not have.

Why a module of its own: a standing pool (an ImagePreparation with ``spec.standing``, written
by the facade from the tenant's configuration, facade/standing.py) is filled by the same
filler as an announcement (controller/pools.py) and decided by the same plan
(controller/pool_plan.py, rule 4), but three things are its own, kept here so the filler
stays one loop:

- **its sizes and its slot floor** (:func:`standing_of`): ``min``/``max`` from the spec, and
  the next slot from the larger of ``status.nextSlot`` and what this process wrote last
  (its own patch reaches the cache a moment later);
- **the namespace's room** (:func:`room`): a standing pool refills as claims drain it, so
  unlike an announcement (admitted once, by the facade, for its whole count) it must stop
  where the tenant's quota is: the spec's ``tenantLimit`` (the tenant's ``max_sandboxes``)
  less the namespace's live sandbox pods in the controller's caches (bound, pending, and
  those the filler created that the watch does not show yet). The facade's admission stays
  the quota's gate for cold creates; this only keeps the pool from taking the tenant over it;
- **its gauges** (controller/pool_metrics.py): each pool's target (``min``) and how far
  short of it the reserve is.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Iterable, Mapping

from controller.pool_plan import Announcement, PoolPod, Standing
from controller.view import ClusterView
from kube import KubeClient
from kube.cache import Obj
from kube.contract import LABEL_SANDBOX
from kube.errors import KubeError
from kube.preparation_contract import IMAGE_PREPARATIONS
from sandman.wire.image_preparation import PoolProgress, PreparationSpec

__all__ = [
    "next_slot_of",
    "record_slots",
    "reserve",
    "room",
    "standing_of",
    "standing_progress",
    "with_next_slot",
]

log = logging.getLogger(__name__)
_MERGE = "application/merge-patch+json"

_TERMINAL = ("Succeeded", "Failed")


def next_slot_of(obj: Obj) -> int:
    """``status.nextSlot`` of an ImagePreparation (0 when absent or unreadable)."""
    value = (obj.get("status") or {}).get("nextSlot", 0)
    return value if isinstance(value, int) and value >= 0 else 0


def standing_of(spec: PreparationSpec | None, next_slot: int) -> Standing | None:
    if spec is None or spec.standing is None:
        return None
    return Standing(spec.standing.min, spec.standing.max, next_slot)


def with_next_slot(a: Announcement, next_slot: int) -> Announcement:
    if a.standing is None or a.standing.next_slot == next_slot:
        return a
    return dataclasses.replace(a, standing=dataclasses.replace(a.standing, next_slot=next_slot))


async def record_slots(
    client: KubeClient, next_slots: Mapping[tuple[str, str], int]
) -> set[tuple[str, str]]:
    """Merge-patch each growing standing pool's ``status.nextSlot`` before its creates
    are sent; the pools whose write landed (the others create nothing this decision: a slot
    is never created above a floor that is not recorded)."""

    async def one(key: tuple[str, str], slot: int) -> tuple[str, str] | None:
        path = IMAGE_PREPARATIONS.path(key[0], key[1], "status")
        body = {"status": {"nextSlot": slot}}
        try:
            await client.request("PATCH", path, body=body, content_type=_MERGE)
        except KubeError as e:
            log.info("recording the next slot of %s/%s failed: %s", key[0], key[1], e)
            return None
        return key

    done = await asyncio.gather(*(one(k, v) for k, v in next_slots.items()))
    return {k for k in done if k is not None}


def standing_progress(
    a: Announcement, pods: list[PoolPod], spent: set[tuple[str, str]]
) -> PoolProgress:
    """A standing pool's counts: wanted its min, created and claimed its pods that exist,
    ready the unclaimed Ready ones."""
    assert a.standing is not None
    mine = [p for p in pods if not p.deleting]
    claimed = sum(1 for p in mine if (p.namespace, p.name) in spent)
    ready = sum(
        1 for p in mine if p.state == "ready" and p.node_ok and (p.namespace, p.name) not in spent
    )
    return PoolProgress(wanted=a.standing.min, created=len(mine), ready=ready, claimed=claimed)


def room(
    view: ClusterView, limits: Mapping[str, int], recent: Iterable[tuple[str, str]]
) -> dict[str, int]:
    """namespace -> how many sandboxes its standing pools may still add: its tenant's limit
    less its live sandbox pods (for the namespaces in ``limits`` only)."""
    if not limits:
        return {}
    live = dict.fromkeys(limits, 0)
    seen: set[tuple[str, str]] = set()
    for cache, unbound_only in ((view.bound.cache, False), (view.pending.cache, True)):
        for pod in cache:
            meta = pod.get("metadata") or {}
            ns = str(meta.get("namespace") or "")
            if ns not in live or not (meta.get("labels") or {}).get(LABEL_SANDBOX):
                continue
            if unbound_only and (pod.get("spec") or {}).get("nodeName"):
                continue  # the pending watch may show bound pods too: counted once
            if meta.get("deletionTimestamp") or (pod.get("status") or {}).get("phase") in (
                _TERMINAL
            ):
                continue
            live[ns] += 1
            seen.add((ns, str(meta.get("name") or "")))
    for key in recent:
        if key[0] in live and key not in seen:
            live[key[0]] += 1
    return {ns: max(0, limits[ns] - n) for ns, n in live.items()}


def reserve(pods: Iterable[PoolPod], spent: set[tuple[str, str]]) -> int:
    """The unclaimed pool pods that count toward ``min``: starting or Ready, on a good node."""
    return sum(
        1
        for p in pods
        if (p.namespace, p.name) not in spent
        and not p.deleting
        and p.state != "failed"
        and p.node_ok
    )
