"""Announcements with sandboxes as the facade writes them, and their pool pods, for the pool
filler's tests (tests/controller/test_pools.py, test_pools_apf.py): one ImagePreparation
carrying the facade's own pool template (facade/podspec.render_pool_template)."""

from __future__ import annotations

import contextlib
import datetime as dt
from typing import Any

from devstack.crds import image_preparation_crd, sandbox_claim_crd
from facade.podspec import DaemonDelivery, SandboxClass, render_pool_template
from kube import PODS, KubeClient
from kube.errors import AlreadyExists
from kube.pool_contract import LABEL_POOL, pool_pod_name
from kube.preparation_contract import IMAGE_PREPARATIONS
from kube.resources import Resource

__all__ = ["ANN", "NS", "Images", "announce", "pool_pods", "wanted"]

CRDS = Resource("apiextensions.k8s.io", "v1", "customresourcedefinitions", "CRD", False)
NS, ANN = "default", "prep-pool1"
Images = tuple[tuple[str, int], ...]


async def announce(client: KubeClient, images: Images, name: str = ANN) -> None:
    """The CRDs (if missing) and one announcement of ``images`` with ``sandboxes``."""
    for crd in (image_preparation_crd(), sandbox_claim_crd()):
        with contextlib.suppress(AlreadyExists):
            await client.create(CRDS, crd)
    expires = dt.datetime.now(dt.UTC) + dt.timedelta(hours=1)
    template = render_pool_template(
        images[0][0],
        SandboxClass("tiny"),
        DaemonDelivery("host-path"),
        announcement=name,
        namespace=NS,
        tenant="t1",
        pool_token="pool-token",
        expires_at=expires,
    )
    body = {
        "apiVersion": IMAGE_PREPARATIONS.api_version,
        "kind": IMAGE_PREPARATIONS.kind,
        "metadata": {"name": name},
        "spec": {
            "images": [{"image": i, "count": n} for i, n in images],
            "expiresAt": expires.isoformat(),
            "sandboxes": True,
            "class": "tiny",
            "podTemplate": template,
        },
    }
    await client.create(IMAGE_PREPARATIONS, body, NS)


def wanted(images: Images, name: str = ANN) -> set[str]:
    """The pod names of every slot the announcement wants."""
    return {pool_pod_name(name, i, s) for i, (_, n) in enumerate(images) for s in range(n)}


async def pool_pods(client: KubeClient, name: str = ANN) -> dict[str, dict[str, Any]]:
    """The announcement's pool pods in the API server, by name."""
    listed = await client.list(PODS, NS, label_selector=f"{LABEL_POOL}={name}")
    return {p["metadata"]["name"]: p for p in listed["items"]}
