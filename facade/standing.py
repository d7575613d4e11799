"""Standing pools: the tenants' configured pools written as ImagePreparation objects.

Why the facade writes them: a standing pool's pods are the tenant's sandboxes made ahead, so
their template needs what only the facade has — the class's hardening, the daemon's delivery,
the pool token derived from the facade's secret — exactly as an announcement's does
(facade/announcements.py). The controller's pool filler then keeps each one filled
(controller/pools.py, controller/standing.py) and its claims hand the pods out; nothing here
is on a create's path.

**One object per pool, the same from every replica.** Its name comes from the pool's (image,
class) (:func:`standing_name`), its template has nothing of the time in it (no expiry), and
its digest annotation is the spec's: every replica renders byte-for-byte the same object, so
two replicas applying at once write one object — the second create is an AlreadyExists, a
replace whose digest is already there is skipped.

**Applied at start, then every ``resync_s``:** a pool added to the file is created, one whose
sizes or template changed is replaced (its pods keep the template they were created with
until claimed), and a standing object of a tenant's namespace that the file no longer names
is deleted — the filler then deletes its unclaimed pods (claimed ones are their trainers').
While replicas of two versions of the file run side by side (a rolling update), each applies
its own; the last replica to start, or to resync, wins. A tenant removed from the file
altogether is no longer watched: its namespace's standing objects stay until an operator
deletes them (docs/operator-guide.md, "Standing pools").

Without the pooled source (``--service-pooled`` off) nothing claims pool pods, so no standing
object is kept: the configured pools are treated as none (and existing ones are deleted).
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import random
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import msgspec

from kube import AlreadyExists, KubeClient, KubeError, NotFound
from kube.cache import Obj
from kube.contract import ANNOTATION_REQUEST_DIGEST
from kube.pool_contract import LABEL_STANDING
from kube.preparation_contract import IMAGE_PREPARATIONS
from sandman.base.backoff import Backoff
from sandman.base.settings import fixed, setting
from sandman.wire.image_preparation import ImageRequest, PreparationSpec
from sandman.wire.image_preparation import StandingPool as StandingSizes

from .podspec import DaemonDelivery, SandboxClass, render_pool_template
from .tenancy import StandingPool, Tenant
from .tokens import TokenMinter

__all__ = ["StandingPools", "StandingSettings", "standing_name", "standing_object"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class StandingSettings:
    resync_s: float = setting(
        300.0,
        help="the tenants' standing pools are applied again this often (a GET per pool when "
        "nothing changed): a pool object deleted by hand comes back, and the last replica to "
        "apply wins a rolling update's two files",
    )
    retry: Backoff = fixed(
        Backoff(initial_s=0.5, cap_s=30.0, jitter="equal"),
        why="a failed apply is retried until it lands; the delays only spread the retries out",
    )

    def __post_init__(self) -> None:
        if self.resync_s <= 0:
            raise ValueError("resync_s must be > 0")


def standing_name(pool: StandingPool) -> str:
    """The pool's ImagePreparation: the same name from every replica, a short DNS label (its
    pods are ``<name>-p0-<slot>``)."""
    material = f"{pool.image}\0{pool.sandbox_class}"
    return f"standing-{hashlib.sha256(material.encode()).hexdigest()[:16]}"


def standing_object(
    tenant: Tenant,
    pool: StandingPool,
    sandbox_class: SandboxClass,
    delivery: DaemonDelivery,
    minter: TokenMinter,
) -> Obj:
    """The ImagePreparation of one standing pool (deterministic: see the module docstring)."""
    name = standing_name(pool)
    template = render_pool_template(
        pool.image,
        sandbox_class,
        delivery,
        announcement=name,
        namespace=tenant.namespace,
        tenant=tenant.name,
        pool_token=minter.pool_token_for(tenant.namespace, name),
        expires_at=None,
    )
    # The image's count is the reserve (what starts at once from it), not max: the image
    # preparer sizes the nodes that pull it by the count (docs/node-agent.md).
    spec = PreparationSpec(
        images=[ImageRequest(image=pool.image, count=max(1, pool.min))],
        sandboxes=True,
        sandbox_class=pool.sandbox_class,
        pod_template=template,
        standing=StandingSizes(min=pool.min, max=pool.max, tenant_limit=tenant.max_sandboxes),
    )
    # Without the unset fields (deadline, expiresAt): an API server prunes nulls anyway.
    raw = {k: v for k, v in msgspec.to_builtins(spec).items() if v is not None}
    digest = hashlib.sha256(msgspec.json.encode(raw, order="sorted")).hexdigest()[:32]
    return {
        "apiVersion": IMAGE_PREPARATIONS.api_version,
        "kind": IMAGE_PREPARATIONS.kind,
        "metadata": {
            "name": name,
            "namespace": tenant.namespace,
            "labels": {LABEL_STANDING: "true"},
            "annotations": {ANNOTATION_REQUEST_DIGEST: digest},
        },
        "spec": raw,
    }


class StandingPools:
    """``await run()`` in the background: apply every tenant's pools until cancelled."""

    def __init__(
        self,
        client: KubeClient,
        tenants: list[Tenant],
        classes: Mapping[str, SandboxClass],
        delivery: DaemonDelivery,
        minter: TokenMinter,
        settings: StandingSettings,
        *,
        enabled: bool = True,
    ) -> None:
        self.client = client
        self.settings = settings
        #: namespace -> the objects it should have (none at all without the pooled source).
        self.wanted: dict[str, list[Obj]] = {
            t.namespace: [
                standing_object(t, p, classes[p.sandbox_class], delivery, minter)
                for p in (t.pools if enabled else ())
            ]
            for t in tenants
        }
        #: Applies that landed, by outcome (created, replaced, unchanged, deleted): for tests.
        self.counts = dict.fromkeys(("created", "replaced", "unchanged", "deleted"), 0)
        self.applied = asyncio.Event()

    async def run(self) -> None:
        while True:
            attempt = 0
            while not await self.apply_all():
                attempt += 1
                await asyncio.sleep(self.settings.retry.delay(attempt, None, random))
            self.applied.set()
            await asyncio.sleep(self.settings.resync_s)

    async def apply_all(self) -> bool:
        """One pass over every tenant namespace; whether every write landed."""
        results = await asyncio.gather(*(self._namespace(ns, o) for ns, o in self.wanted.items()))
        return all(results)

    async def _namespace(self, namespace: str, objects: list[Obj]) -> bool:
        try:
            for obj in objects:
                await self._apply(namespace, obj)
            listed = await self.client.list(
                IMAGE_PREPARATIONS, namespace, label_selector=f"{LABEL_STANDING}=true"
            )
            names = {o["metadata"]["name"] for o in objects}
            for found in listed.get("items") or ():
                if found["metadata"]["name"] not in names:
                    await self._delete(namespace, found)
        except NotFound:
            log.warning("no ImagePreparation resource: the CRD is not installed")
            return False
        except KubeError as e:
            log.info("applying the standing pools of %s failed (%s); retried", namespace, e)
            return False
        return True

    async def _apply(self, namespace: str, obj: Obj) -> None:
        name = obj["metadata"]["name"]
        try:
            await self.client.create(IMAGE_PREPARATIONS, obj, namespace)
            self.counts["created"] += 1
            log.info("standing pool %s/%s created", namespace, name)
            return
        except AlreadyExists:
            pass
        current = await self.client.get(IMAGE_PREPARATIONS, name, namespace)
        if _digest(current) == _digest(obj):
            self.counts["unchanged"] += 1
            return
        body: dict[str, Any] = {**obj, "metadata": {**obj["metadata"]}}
        body["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
        await self.client.replace(IMAGE_PREPARATIONS, name, body, namespace)
        self.counts["replaced"] += 1
        log.info("standing pool %s/%s replaced (its configuration changed)", namespace, name)

    async def _delete(self, namespace: str, found: Obj) -> None:
        name = found["metadata"]["name"]
        try:
            await self.client.delete(
                IMAGE_PREPARATIONS, name, namespace, uid=found["metadata"].get("uid")
            )
        except NotFound:
            return
        self.counts["deleted"] += 1
        log.info("standing pool %s/%s deleted (no longer configured)", namespace, name)


def _digest(obj: Obj) -> str | None:
    return ((obj.get("metadata") or {}).get("annotations") or {}).get(ANNOTATION_REQUEST_DIGEST)
