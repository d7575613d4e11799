"""Announced sandboxes at the facade (``POST /v1/prepare`` with ``sandboxes``,
facade/announcements.py): a real facade against a real simcluster API server with the
ImagePreparation CRD, no controller.

Checked: the class is checked as a create checks it (400 ``unknown_class``; the tenant's
allow-list is the create's own check, facade/fairness.check_class); an announcement over
the tenant's sandbox limit alone is a 400 ``prepare_too_large``; the pools of live
announcements count against ``max_sandboxes`` as live sandboxes do (429 ``quota_exceeded``
with a Retry-After), a created pool pod once, not twice; the object carries the pool
template, from which a slot's pod is a valid Pod the API server stores; ``GET
/v1/prepare/{id}`` shows the pool's counts."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from facade.app import FacadeSettings
from kube import PODS, KubeClient
from kube.contract import ANNOTATION_EXPIRES_AT, LABEL_CLASS, LABEL_TENANT
from kube.pool_contract import LABEL_POOL, pool_pod, pool_pod_name
from kube.preparation_contract import IMAGE_PREPARATIONS
from kube.times import parse_time
from simcluster.embedded import EmbeddedCluster
from tests.support.facade import NAMESPACE, LiveFacade, live_facade
from tests.support.kube import FAST
from tests.support.pools import install_preparation_crd
from tests.support.wait import wait_until_async

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]


@pytest.fixture
async def pooled(
    cluster: EmbeddedCluster, facade_settings: FacadeSettings, tmp_path: Path
) -> AsyncIterator[LiveFacade]:
    async with await KubeClient.connect(FAST, kubeconfig=str(cluster.kubeconfig)) as client:
        await install_preparation_crd(client)
    async with live_facade(
        cluster.kubeconfig,
        facade_settings,
        tmp_path,
        classes=("tiny", "big"),
        max_sandboxes=10,
    ) as running:
        yield running


async def _announce(
    live: LiveFacade, images: dict[str, int], **extra: Any
) -> tuple[int, dict[str, Any], dict[str, str]]:
    body = {"images": [{"image": i, "count": n} for i, n in images.items()], **extra}
    async with live.http.post("/v1/prepare", json=body) as r:
        return r.status, await r.json(), dict(r.headers)


async def test_the_class_and_the_counts_are_checked_as_a_create_checks_them(
    pooled: LiveFacade,
) -> None:
    status, got, _ = await _announce(pooled, {"r.local/a:1": 2}, sandboxes=True, **{"class": "x"})
    assert (status, got["error"]["reason"]) == (400, "unknown_class"), got
    status, got, _ = await _announce(pooled, {"r.local/a:1": 6, "r.local/b:1": 5}, sandboxes=True)
    assert (status, got["error"]["reason"]) == (400, "prepare_too_large"), got
    assert "limit of 10 live sandboxes" in got["error"]["message"]
    status, got, _ = await _announce(pooled, {"r.local/a:1": 2}, sandboxes="yes")
    assert (status, got["error"]["reason"]) == (400, "invalid_request"), got
    # The same counts without sandboxes are images only: no sandbox limit applies.
    status, got, _ = await _announce(pooled, {"r.local/a:1": 6, "r.local/b:1": 5})
    assert status == 201 and got["sandboxes"] is False and got["pool"] is None, got


async def test_the_object_carries_a_template_every_slot_is_a_valid_pod_of(
    pooled: LiveFacade, cluster: EmbeddedCluster
) -> None:
    status, got, _ = await _announce(pooled, {"r.local/a:1": 2, "r.local/b:1": 1}, sandboxes=True)
    assert status == 201, got
    assert (got["sandboxes"], got["class"]) == (True, "tiny")
    assert got["pool"] == {"wanted": 3, "created": 0, "ready": 0, "claimed": 0}
    pid = got["id"]
    async with await KubeClient.connect(FAST, kubeconfig=str(cluster.kubeconfig)) as client:
        obj = await client.get(IMAGE_PREPARATIONS, pid, NAMESPACE)
        spec = obj["spec"]
        assert (spec["sandboxes"], spec["class"]) == (True, "tiny")
        template = spec["podTemplate"]
        labels = template["metadata"]["labels"]
        assert labels[LABEL_POOL] == pid
        assert (labels[LABEL_TENANT], labels[LABEL_CLASS]) == ("t1", "tiny")
        expires = parse_time(template["metadata"]["annotations"][ANNOTATION_EXPIRES_AT])
        assert expires == parse_time(spec["expiresAt"]).replace(microsecond=0)  # type: ignore[union-attr]
        pod = pool_pod(template, pid, 1, "r.local/b:1", 0)
        created = await client.create(PODS, pod, NAMESPACE)
        assert created["metadata"]["name"] == pool_pod_name(pid, 1, 0)
        # The controller's status is what GET shows.
        pool = {"wanted": 3, "created": 1, "ready": 0, "claimed": 0}
        await client.request(
            "PATCH",
            IMAGE_PREPARATIONS.path(NAMESPACE, pid, "status"),
            body={"status": {"pool": pool}},
            content_type="application/merge-patch+json",
        )
    async with pooled.http.get(f"/v1/prepare/{pid}") as r:
        assert r.status == 200
        assert (await r.json())["pool"] == pool


async def test_pools_count_against_the_sandbox_limit_once(
    pooled: LiveFacade, cluster: EmbeddedCluster
) -> None:
    status, first, _ = await _announce(pooled, {"r.local/a:1": 6}, sandboxes=True)
    assert status == 201, first
    status, got, headers = await _announce(pooled, {"r.local/b:1": 5}, sandboxes=True)
    assert (status, got["error"]["reason"]) == (429, "quota_exceeded"), got
    assert "Retry-After" in headers and "11 announced" in got["error"]["message"]
    # Images only: no sandbox is asked for, the limit does not apply.
    status, got, _ = await _announce(pooled, {"r.local/b:1": 5})
    assert status == 201, got
    # Four of the six slots created: live pods now, counted once (4 live + 2 + 4 = 10).
    async with await KubeClient.connect(FAST, kubeconfig=str(cluster.kubeconfig)) as client:
        obj = await client.get(IMAGE_PREPARATIONS, first["id"], NAMESPACE)
        for slot in range(4):
            pod = pool_pod(obj["spec"]["podTemplate"], first["id"], 0, "r.local/a:1", slot)
            await client.create(PODS, pod, NAMESPACE)
    index = pooled.facade.index
    await wait_until_async(lambda: index.pool_pods(NAMESPACE, first["id"]) == 4, timeout_s=10)
    status, got, _ = await _announce(pooled, {"r.local/c:1": 4}, sandboxes=True)
    assert status == 201, got
    status, got, _ = await _announce(pooled, {"r.local/d:1": 1}, sandboxes=True)
    assert (status, got["error"]["reason"]) == (429, "quota_exceeded"), got
