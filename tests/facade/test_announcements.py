"""Announcements bounded per tenant and tied to their owner (facade/announcements.py): a real
facade against a real simcluster API server with the ImagePreparation CRD, no controller
(what is checked is the facade's own decision and what it deletes).

Checked: an announcement over a cap alone is a 400 ``prepare_too_large``; one that would
take the tenant's live announcements over a cap is a 429 ``prepare_quota_exceeded`` with a
Retry-After, and fits once the earlier one goes; a replay of an admitted announcement is
not refused by the cap; releasing the owner deletes its announcements and no other's."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from facade.app import FacadeSettings
from kube import KubeClient
from kube.preparation_contract import IMAGE_PREPARATIONS
from simcluster.embedded import EmbeddedCluster
from tests.support.facade import NAMESPACE, LiveFacade, live_facade
from tests.support.kube import FAST
from tests.support.pools import install_preparation_crd

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]


@pytest.fixture
async def capped(
    cluster: EmbeddedCluster, facade_settings: FacadeSettings, tmp_path: Path
) -> AsyncIterator[LiveFacade]:
    async with await KubeClient.connect(FAST, kubeconfig=str(cluster.kubeconfig)) as client:
        await install_preparation_crd(client)
    async with live_facade(
        cluster.kubeconfig,
        facade_settings,
        tmp_path,
        max_prepared_images=3,
        max_prepared_sandboxes=20,
    ) as running:
        yield running


async def _announce(
    live: LiveFacade, images: dict[str, int], owner: str, key: str | None = None
) -> tuple[int, dict[str, Any], dict[str, str]]:
    body = {"images": [{"image": i, "count": n} for i, n in images.items()], "owner": owner}
    headers = {"Idempotency-Key": key} if key else {}
    async with live.http.post("/v1/prepare", json=body, headers=headers) as r:
        return r.status, await r.json(), dict(r.headers)


async def test_caps_per_tenant_over_live_announcements(capped: LiveFacade) -> None:
    status, got, _ = await _announce(capped, {f"r.local/t-{i}:1": 1 for i in range(4)}, "a")
    assert (status, got["error"]["reason"]) == (400, "prepare_too_large"), got
    status, got, _ = await _announce(capped, {"r.local/t-0:1": 21}, "a")
    assert (status, got["error"]["reason"]) == (400, "prepare_too_large"), got

    status, first, _ = await _announce(capped, {"r.local/t-0:1": 8, "r.local/t-1:1": 8}, "a", "k1")
    assert status == 201, first
    # The same image again counts once; the sandboxes add up: 16 + 5 > 20.
    status, got, headers = await _announce(capped, {"r.local/t-1:1": 5}, "b")
    assert (status, got["error"]["reason"]) == (429, "prepare_quota_exceeded"), got
    assert "Retry-After" in headers and "21 expected sandboxes" in got["error"]["message"]
    status, got, _ = await _announce(capped, {"r.local/t-2:1": 1, "r.local/t-3:1": 1}, "b")
    assert (status, got["error"]["reason"]) == (429, "prepare_quota_exceeded"), got  # 4 images > 3
    status, replay, _ = await _announce(capped, {"r.local/t-0:1": 8, "r.local/t-1:1": 8}, "a", "k1")
    assert (status, replay["id"]) == (200, first["id"])  # a replay is not refused

    async with capped.http.delete("/v1/sandboxes", params={"owner": "a"}) as r:
        assert r.status == 202
        assert (await r.json())["preparations"] == 1
    status, got, _ = await _announce(capped, {"r.local/t-2:1": 10, "r.local/t-3:1": 10}, "b")
    assert status == 201, got  # the room came back with the owner's release


async def test_releasing_the_owner_deletes_its_announcements_only(
    capped: LiveFacade, cluster: EmbeddedCluster
) -> None:
    ids = {}
    for owner in ("run-a", "run-b"):
        status, got, _ = await _announce(capped, {f"r.local/{owner}:1": 2}, owner)
        assert status == 201, got
        ids[owner] = got["id"]
    async with capped.http.delete("/v1/sandboxes", params={"owner": "run-a"}) as r:
        assert (r.status, (await r.json())["preparations"]) == (202, 1)
    async with await KubeClient.connect(FAST, kubeconfig=str(cluster.kubeconfig)) as client:
        left = await client.list(IMAGE_PREPARATIONS, NAMESPACE)
    assert [o["metadata"]["name"] for o in left["items"]] == [ids["run-b"]]
    async with capped.http.get(f"/v1/prepare/{ids['run-a']}") as r:
        assert (r.status, (await r.json())["error"]["reason"]) == (404, "preparation_not_found")
