"""The placement endpoint authenticates its caller (controller/placement_auth.py): a real
controller against simcluster, which answers the TokenReviews — the facade's identity is
placed, no token / an unknown token / another identity's token get 401/403 with their
reasons before anything else is answered; the reviews are cached per token, bounded, one
in flight per token; and a token bound to the placement audience is required where the
controller says so."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml

from controller.placement_auth import CallerVerifier, PlacementAuthSettings
from kube import KubeClient
from kube.placement import PLACEMENT_PATH, PlacementClient
from simcluster.embedded import EmbeddedCluster
from tests.support.controller import CONTROLLER_USER
from tests.support.kube import FAST
from tests.support.kubectl import Kubectl
from tests.support.placement import LEASE, placing_controller, serving, two_nodes
from tests.support.pods import pod
from tests.support.wait import wait_until_async

pytestmark = pytest.mark.anyio

BODY = {"namespace": "default", "names": ["sb-0"], "template": pod("t", app="sandbox")}


@pytest.fixture
def cluster() -> Any:
    with two_nodes() as c:
        yield c


def kubeconfig_token(path: Path) -> str:
    token: str = yaml.safe_load(path.read_text())["users"][0]["user"]["token"]
    return token


async def post(url: str, headers: dict[str, str]) -> tuple[int, dict[str, Any]]:
    async with (
        aiohttp.ClientSession(url, headers=headers) as http,
        http.post(PLACEMENT_PATH, json=BODY) as resp,
    ):
        return resp.status, await resp.json()


async def test_only_the_facade_s_identity_is_placed(
    cluster: EmbeddedCluster, client: KubeClient
) -> None:
    assert cluster.cluster is not None
    other = kubeconfig_token(cluster.cluster.kubeconfigs["controller"])  # CONTROLLER_USER
    async with placing_controller(cluster, "a") as a:
        await wait_until_async(lambda: serving(a), timeout_s=10)
        status, body = await post(a.health_url, client.bearer_headers())
        assert status == 200 and body["nodes"][0] in ("node-0", "node-1")
        refused = {
            "none": await post(a.health_url, {}),
            "basic": await post(a.health_url, {"Authorization": "Basic YTpi"}),
            "unknown": await post(a.health_url, {"Authorization": "Bearer nope"}),
            "other": await post(a.health_url, {"Authorization": f"Bearer {other}"}),
        }
        assert {k: (s, b["reason"]) for k, (s, b) in refused.items()} == {
            "none": (401, "unauthenticated"),
            "basic": (401, "unauthenticated"),
            "unknown": (401, "unauthenticated"),
            "other": (403, "caller_not_allowed"),
        }
        assert CONTROLLER_USER in refused["other"][1]["message"]
        assert a.placement is not None and a.placement.counts["unauthorized"] == 4
        # The facade's client presents its credentials' token by itself.
        placer = PlacementClient(client, LEASE)
        try:
            assert await placer.place("default", ["sb-1"], pod("t", app="sandbox"))
        finally:
            await placer.close()


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


async def test_reviews_are_cached_per_token_bounded_and_shared_in_flight(
    cluster: EmbeddedCluster, client: KubeClient
) -> None:
    clock = Clock()
    settings = PlacementAuthSettings(users="admin", cache_ttl_s=10, cache_size=2)
    verifier = CallerVerifier(client, settings, clock=clock)
    admin = client.bearer_headers()["Authorization"]
    results = await asyncio.gather(*(verifier.check(admin) for _ in range(20)))
    assert results == [None] * 20 and verifier.reviews == 1  # one review in flight
    assert await verifier.check(admin) is None and verifier.reviews == 1  # cached
    clock.now = 10.5  # past the TTL: reviewed again
    assert await verifier.check(admin) is None and verifier.reviews == 2
    # Two other tokens (refused: cached too) push the admin's out of a cache of two.
    for token in ("x", "y"):
        refusal = await verifier.check(f"Bearer {token}")
        assert refusal is not None and refusal.status == 401
    assert verifier.reviews == 4
    assert await verifier.check(admin) is None and verifier.reviews == 5


async def test_a_failed_review_is_a_503_and_not_cached() -> None:
    with two_nodes() as cluster:
        async with await KubeClient.connect(FAST, kubeconfig=str(cluster.kubeconfig)) as api:
            clock = Clock()
            verifier = CallerVerifier(api, PlacementAuthSettings(users="admin"), clock=clock)
            header = api.bearer_headers()["Authorization"]
            assert await verifier.check(header) is None
            clock.now = 60.0  # past the TTL, and the API server gone
            cluster.stop()
            refusal = await verifier.check(header)
            again = await verifier.check(header)
    assert refusal is not None and (refusal.status, refusal.reason) == (503, "token_review_failed")
    assert again is not None and again.reason == "token_review_failed"
    assert verifier.reviews == 3, "a failure is asked again, not cached"


async def test_an_audience_bound_token_is_required_where_set(
    cluster: EmbeddedCluster, client: KubeClient
) -> None:
    kubectl = Kubectl(cluster.kubeconfig)
    kubectl.run("create", "serviceaccount", "facade")
    bound = kubectl.run("create", "token", "facade", "--audience=sandman-placement").stdout
    api_token = kubectl.run("create", "token", "facade").stdout
    user = "system:serviceaccount:default:facade"
    settings = PlacementAuthSettings(users=user, audiences="sandman-placement")
    verifier = CallerVerifier(client, settings)
    assert await verifier.check(f"Bearer {bound.strip()}") is None
    refusal = await verifier.check(f"Bearer {api_token.strip()}")
    assert refusal is not None and refusal.reason == "unauthenticated"


async def test_settings_name_at_least_one_caller() -> None:
    with pytest.raises(ValueError, match="at least one caller"):
        PlacementAuthSettings(users=" , ", groups="")
    assert PlacementAuthSettings(users="", groups="sandman-facades")
