"""Owner Leases: how a trainer run says "I am alive" (one write per renewal).

A trainer (the SDK, in the background) renews its owner's Lease every few seconds. The
controller's owner-lease collector (controller/owners.py) deletes every sandbox labelled with
that owner once the Lease goes unrenewed for its duration, so a crashed trainer leaks
nothing for longer than the duration. Renewal is a merge patch of ``spec.renewTime``; the
first renewal creates the Lease. Lease names are derived from the owner (label values allow
characters object names do not), and the owner itself is in the label.
"""

from __future__ import annotations

import hashlib
import re
from typing import Any

from kube import LEASES, AlreadyExists, KubeClient, KubeError, NotFound
from kube.contract import LABEL_OWNER
from kube.times import format_micro_time
from sandman.wire.facade import LeaseStatus

from .errors import from_kube_error

__all__ = ["OwnerLeaseWriter", "lease_name"]

_UNSAFE = re.compile(r"[^a-z0-9-]+")


def lease_name(owner: str) -> str:
    readable = _UNSAFE.sub("-", owner.lower()).strip("-")[:40] or "owner"
    return f"sandman-owner-{readable}-{hashlib.sha256(owner.encode()).hexdigest()[:8]}"


class OwnerLeaseWriter:
    def __init__(self, client: KubeClient, identity: str = "sandman-facade") -> None:
        self.client = client
        self.identity = identity

    async def renew(self, namespace: str, owner: str, duration_s: int) -> LeaseStatus:
        now = format_micro_time()
        spec = {"holderIdentity": owner, "leaseDurationSeconds": duration_s, "renewTime": now}
        name = lease_name(owner)
        try:
            try:
                await self.client.patch(LEASES, name, {"spec": spec}, namespace)
            except NotFound:
                try:
                    await self.client.create(LEASES, _lease(name, owner, spec), namespace)
                except AlreadyExists:  # a concurrent first renewal won: renew it
                    await self.client.patch(LEASES, name, {"spec": spec}, namespace)
        except KubeError as e:
            raise from_kube_error(e, "renewing the owner lease") from e
        return LeaseStatus(owner=owner, duration_s=duration_s, renewed_at=now)

    async def delete(self, namespace: str, owner: str) -> None:
        try:
            await self.client.delete(LEASES, lease_name(owner), namespace)
        except NotFound:
            pass
        except KubeError as e:
            raise from_kube_error(e, "deleting the owner lease") from e


def _lease(name: str, owner: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": name, "labels": {LABEL_OWNER: owner}},
        "spec": {**spec, "acquireTime": spec["renewTime"]},
    }
