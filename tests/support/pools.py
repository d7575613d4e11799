"""Pool pods and announcements as production makes them, for the tests of pools.

- :func:`make_pool`: pool pods made through the pool contract, as the filler makes them (the
  facade renders an announcement's template, ``facade.podspec.render_pool_template``, and
  ``kube.pool_contract.pool_pod`` makes each slot's pod of it), created with
  ``spec.nodeName`` so that simcluster's process runtime starts a real pool daemon for each.
  The tests of claims build their pools here, never by hand, so they claim exactly what
  production will hand out.
- :func:`announce`: an announcement with sandboxes as the facade writes it (one
  ImagePreparation carrying the facade's own pool template), for the pool filler's tests
  (tests/controller/test_pools.py, test_pools_apf.py); :func:`wanted` and :func:`pool_pods`
  are what the filler should make of it.
"""

from __future__ import annotations

import contextlib
import datetime as dt
from datetime import UTC, datetime, timedelta
from typing import Any

from devstack.crds import image_preparation_crd, sandbox_claim_crd
from facade.config import FacadeConfig
from facade.podspec import DaemonDelivery, SandboxClass, render_pool_template
from kube import PODS, AlreadyExists, KubeClient
from kube.cache import Obj
from kube.pool_contract import LABEL_POOL, pool_pod, pool_pod_name
from kube.preparation_contract import IMAGE_PREPARATIONS
from kube.resources import Resource

__all__ = [
    "ANN", "CRDS", "NS", "Images", "announce", "install_claims_crd", "install_preparation_crd",
    "make_pool", "pool_pods", "wanted",
]  # fmt: skip

CRDS = Resource("apiextensions.k8s.io", "v1", "customresourcedefinitions", "CRD", False)
NS, ANN = "default", "prep-pool1"
Images = tuple[tuple[str, int], ...]


async def install_preparation_crd(client: KubeClient) -> None:
    """The ImagePreparation CRD from manifests/crds (once per cluster)."""
    with contextlib.suppress(AlreadyExists):
        await client.create(CRDS, image_preparation_crd())


async def install_claims_crd(client: KubeClient) -> None:
    """The SandboxClaim CRD from manifests/crds (once per cluster)."""
    with contextlib.suppress(AlreadyExists):
        await client.create(CRDS, sandbox_claim_crd())


async def make_pool(
    client: KubeClient,
    config: FacadeConfig,
    *,
    namespace: str,
    tenant: str,
    image: str,
    count: int,
    nodes: list[str],
    announcement: str = "prep-1",
    sandbox_class: str = "tiny",
    expires_in_s: float = 3600,
) -> list[Obj]:
    """``count`` pool pods of ``image`` for ``announcement``, spread over ``nodes`` in turn:
    the created objects."""
    template = render_pool_template(
        image,
        config.classes[sandbox_class],
        config.delivery,
        announcement=announcement,
        namespace=namespace,
        tenant=tenant,
        pool_token=config.minter.pool_token_for(namespace, announcement),
        expires_at=datetime.now(UTC) + timedelta(seconds=expires_in_s),
    )
    created = []
    for slot in range(count):
        body = pool_pod(template, announcement, 0, image, slot)
        body["spec"]["nodeName"] = nodes[slot % len(nodes)]
        created.append(await client.create(PODS, body, namespace))
    return created


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
