"""Pool pods made through the pool contract, as the filler (the controller's announcements)
will make them: the facade renders an announcement's template
(``facade.podspec.render_pool_template``), ``kube.pool_contract.pool_pod`` makes each
slot's pod of it, and the test creates them with ``spec.nodeName`` so that simcluster's
process runtime starts a real pool daemon for each. The tests of claims build their pools
here, never by hand, so they claim exactly what production will hand out."""

from __future__ import annotations

import contextlib
from datetime import UTC, datetime, timedelta

from devstack.crds import sandbox_claim_crd
from facade.config import FacadeConfig
from facade.podspec import render_pool_template
from kube import PODS, AlreadyExists, KubeClient
from kube.cache import Obj
from kube.pool_contract import pool_pod
from kube.resources import Resource

__all__ = ["CRDS", "install_claims_crd", "make_pool"]

CRDS = Resource("apiextensions.k8s.io", "v1", "customresourcedefinitions", "CRD", False)


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
