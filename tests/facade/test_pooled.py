"""Creates that take pool sandboxes first (facade/pooled.py), through the facade's own HTTP
API, with a real leading controller serving claims (controller/claims.py) and real pool
daemons: simcluster's process runtime runs the pool pods the contract renders
(tests/support/pools.py). A claimed sandbox behaves as a cold one — get, list, wait, tool
calls with its own token and the request's env, release — and a retry gets the same
sandboxes; before its claim a pool sandbox is nobody's and runs nothing."""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from controller.app import Controller
from daemon.sandbox.layout import DAEMON_PORT
from devstack.sandbox_python import SandboxPython, stage_daemon_python
from facade.app import FacadeSettings
from facade.pooled import PooledSettings
from facade.service import ServiceSettings
from kube import NODES, PODS, KubeClient
from kube.pool_contract import SANDBOX_CLAIMS
from simcluster.embedded import EmbeddedCluster
from tests.support.controller import CONTROLLER_USER, cluster_of, writes_by
from tests.support.facade import NAMESPACE, LiveFacade, live_facade
from tests.support.kube import FAST
from tests.support.metrics import sample
from tests.support.placement import LEASE, placing_controller, serving
from tests.support.pools import install_claims_crd, make_pool
from tests.support.wait import wait_until_async

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(120)]

IMAGE, CLASS = "registry.local/task:1", "tiny"
SPEC = {"image": IMAGE, "owner": "run-1", "env": {"TASK": "t-7"}, "labels": {"step": "7"}}
SETTINGS = FacadeSettings(port=0, client=FAST, placement=LEASE)
#: The ``facade_of`` fixture: a live facade of these settings, its sandboxes on the staged Python.
FacadeOf = Callable[[FacadeSettings], AbstractAsyncContextManager[LiveFacade]]


@pytest.fixture(scope="module")
def python(tmp_path_factory: pytest.TempPathFactory) -> SandboxPython:
    """The daemon's Python as the process runtime's sandboxes see it (the checkout stays out
    of the pods): staged once for the module."""
    return stage_daemon_python(tmp_path_factory.mktemp("python"))


@pytest.fixture
def cluster(tmp_path: Path, python: SandboxPython) -> Iterator[EmbeddedCluster]:
    """One node whose pods are real processes (every pool daemon answers its claim)."""
    base = cluster_of(1, cpu="16", foreign=0.0)
    node = dataclasses.replace(base.node, preloaded_images=(IMAGE,))
    settings = dataclasses.replace(base, runtime="process", node=node, process_binds=python.binds)
    with EmbeddedCluster(settings, tmp_path / "cluster") as c:
        yield c


@pytest.fixture
def facade_of(cluster: EmbeddedCluster, python: SandboxPython, tmp_path: Path) -> FacadeOf:
    """A live facade whose sandboxes run the staged Python."""
    return lambda settings: live_facade(
        cluster.kubeconfig, settings, tmp_path, python=python.executable
    )


@pytest.fixture
async def client(cluster: EmbeddedCluster) -> AsyncIterator[KubeClient]:
    async with await KubeClient.connect(FAST, kubeconfig=str(cluster.kubeconfig)) as c:
        await install_claims_crd(c)
        yield c


@pytest.fixture
async def leader(cluster: EmbeddedCluster, client: KubeClient) -> AsyncIterator[Controller]:
    async with placing_controller(cluster, "a") as c:
        await wait_until_async(lambda: serving(c) and _claims_serving(c), timeout_s=15)
        yield c


def _claims_serving(c: Controller) -> bool:
    return c.claims is not None and c.claims.serving


def _offered(c: Controller) -> int:
    assert c.claims is not None
    return c.claims.book.counts((NAMESPACE, IMAGE, CLASS))["ready"]


async def _pool(client: KubeClient, live: LiveFacade, leader: Controller, n: int) -> list[str]:
    """``n`` pool pods, Ready and offered by the leader: their names, oldest first."""
    pods = await make_pool(
        client, live.facade.config, namespace=NAMESPACE, tenant="t1", image=IMAGE, count=n,
        nodes=["node-0"],
    )  # fmt: skip
    await wait_until_async(lambda: _offered(leader) == n, timeout_s=60)
    return [p["metadata"]["name"] for p in pods]


def _claims(live: LiveFacade, outcome: str) -> float:
    registry = live.facade.metrics.registry
    return sample(registry, "sandman_facade_pool_claims_total", outcome=outcome)


async def _batch(live: LiveFacade, count: int, key: str, spec: dict[str, Any] = SPEC) -> Any:
    headers = {"Idempotency-Key": key}
    body = {"spec": spec, "count": count}
    async with live.http.post("/v1/batches", json=body, headers=headers) as r:
        assert r.status == 201, await r.text()
        answer = await r.json()
    assert not answer["failed"]
    return answer["sandboxes"]


async def _get(live: LiveFacade, sid: str) -> tuple[int, Any]:
    async with live.http.get(f"/v1/sandboxes/{sid}") as r:
        return r.status, await r.json()


async def test_a_batch_takes_the_pool_first_and_its_rest_cold(
    facade_of: FacadeOf, client: KubeClient, leader: Controller, cluster: EmbeddedCluster
) -> None:
    async with facade_of(SETTINGS) as live:
        names = await _pool(client, live, leader, 3)
        status, _ = await _get(live, names[0])
        assert status == 404  # an unclaimed pool pod is nobody's sandbox
        sandboxes = await _batch(live, 5, "k-1")
        ids = [s["id"] for s in sandboxes]
        assert set(ids[:3]) == set(names) and not set(ids[3:]) & set(names)
        assert (_claims(live, "partial"), _claims(live, "hit"), _claims(live, "miss")) == (1, 0, 0)
        registry = live.facade.metrics.registry
        assert sample(registry, "sandman_facade_pool_claimed_sandboxes_total") == 3
        assert writes_by(cluster, CONTROLLER_USER, resource="sandboxclaims") == 1
        # The claimed ones are Ready at once, with the request's owner, labels and expiry.
        cold_expiry = sandboxes[3]["expires_at"]
        for s in sandboxes[:3]:
            assert (s["state"], s["owner"], s["labels"]) == ("ready", "run-1", {"step": "7"})
            assert s["expires_at"] == cold_expiry  # the request's TTL, not the pool's hour
        # Tool calls run with the sandbox's own token (the proxy derives it from the pod)
        # and see the request's env.
        async with live.http.post(
            f"/v1/sandboxes/{ids[0]}/exec", json={"command": "echo $TASK"}
        ) as r:
            assert r.status == 200, await r.text()
            assert (await r.json())["stdout"]["data"] == "t-7\n"
        async with live.http.get("/v1/sandboxes", params={"owner": "run-1"}) as r:
            assert sorted(s["id"] for s in (await r.json())["items"]) == sorted(ids)
        async with live.http.get("/v1/sandboxes", params={"label": "step=7"}) as r:
            assert len((await r.json())["items"]) == 5
        # A retry with the same key: the same sandboxes, nothing claimed or created again.
        again = await _batch(live, 5, "k-1")
        assert [s["id"] for s in again] == ids
        assert writes_by(cluster, CONTROLLER_USER, resource="sandboxclaims") == 1
        # Released: deleted, never back in a pool.
        async with live.http.delete(f"/v1/sandboxes/{ids[0]}") as r:
            assert r.status == 202, await r.text()
        await wait_until_async(
            lambda: _absent(client, ids[0]), timeout_s=15, what="the released pod deleted"
        )
        assert _offered(leader) == 0
        async with live.http.delete("/v1/sandboxes", params={"owner": "run-1"}) as r:
            assert r.status in (200, 202), await r.text()
            assert (await r.json())["released"] == 4
        for sid in ids[1:3]:
            await wait_until_async(functools.partial(_absent, client, sid), timeout_s=15)


async def _absent(client: KubeClient, name: str) -> bool:
    pods = (await client.list(PODS, NAMESPACE))["items"]
    return all(p["metadata"]["name"] != name for p in pods)


async def test_a_pool_daemon_runs_nothing_before_its_claim(
    facade_of: FacadeOf, client: KubeClient, leader: Controller, cluster: EmbeddedCluster
) -> None:
    """Pristine: the daemon of an unclaimed pool pod refuses tool calls, with its pool token
    as with the token its claim would bring."""
    async with facade_of(SETTINGS) as live:
        (name,) = await _pool(client, live, leader, 1)
        pod = await client.get(PODS, name, NAMESPACE)
        minter = live.facade.config.minter
        url = f"http://{pod['status']['podIP']}:{DAEMON_PORT}/v1/exec"
        for token in (minter.pool_token_for(NAMESPACE, "prep-1"), minter.token_of(pod)):
            async with (
                aiohttp.ClientSession(headers={"Authorization": f"Bearer {token}"}) as http,
                http.post(url, json={"command": "touch /tmp/ran"}) as r,
            ):
                assert r.status in (401, 409)
                assert (await r.json())["error"]["reason"] in ("sandbox_unclaimed", "invalid_token")
        # Claimed now: the same daemon runs the claim's calls.
        (sandbox,) = await _batch(live, 1, "k-2")
        assert sandbox["id"] == name
        async with live.http.post(f"/v1/sandboxes/{name}/exec", json={"command": "true"}) as r:
            assert r.status == 200, await r.text()


async def test_a_tenant_sized_for_its_pool_claims_it_and_its_limit_still_holds_cold(
    cluster: EmbeddedCluster,
    python: SandboxPython,
    client: KubeClient,
    leader: Controller,
    tmp_path: Path,
) -> None:
    """A pool pod counts against the tenant's limit from its creation, so the create that
    claims it must not count it again: a tenant of 6 sandboxes with 4 in its pool claims all
    4 (counted once: 4 live + 4 would have been refused), and a cold create past the limit
    is still refused."""
    async with live_facade(
        cluster.kubeconfig, SETTINGS, tmp_path, python=python.executable,
        max_sandboxes=6, create_burst=6,
    ) as live:  # fmt: skip
        names = await _pool(client, live, leader, 4)
        index = live.facade.index
        await wait_until_async(lambda: index.claimable(NAMESPACE, IMAGE, CLASS, 4) == 4)
        claimed = await _batch(live, 4, "k-quota")
        assert {s["id"] for s in claimed} == set(names)
        assert index.claimable(NAMESPACE, IMAGE, CLASS, 4) == 0
        body = {"spec": SPEC, "count": 4}
        async with live.http.post(
            "/v1/batches", json=body, headers={"Idempotency-Key": "k-c"}
        ) as r:
            assert r.status == 429, await r.text()
            assert (await r.json())["error"]["reason"] == "quota_exceeded"


async def test_no_pool_is_a_miss_and_the_create_goes_cold(
    facade_of: FacadeOf, client: KubeClient, leader: Controller, cluster: EmbeddedCluster
) -> None:
    async with facade_of(SETTINGS) as live:
        sandboxes = await _batch(live, 2, "k-3")
        assert _claims(live, "miss") == 1
        pods = {p["metadata"]["name"] for p in (await client.list(PODS, NAMESPACE))["items"]}
        assert {s["id"] for s in sandboxes} <= pods
        assert (await client.list(SANDBOX_CLAIMS, NAMESPACE))["items"] == []


async def test_a_claims_endpoint_that_hangs_costs_a_create_its_timeout_only(
    facade_of: FacadeOf, client: KubeClient
) -> None:
    """No controller answers (the Lease names a URL nobody serves in time): the create
    goes cold after claim_timeout_s, and the pre-placed ask after it falls back too."""

    async def hang(request: web.Request) -> web.Response:
        await asyncio.Event().wait()  # never answers: the caller's timeout ends it
        raise AssertionError("unreachable")

    app = web.Application()
    app.router.add_post("/{path:.*}", hang)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    try:
        url = str(server.make_url("")).rstrip("/")
        placement = dataclasses.replace(LEASE, url=url, timeout_s=0.2, leader_wait_s=0)
        pooled = PooledSettings(claim_timeout_s=0.2)
        settings = dataclasses.replace(
            SETTINGS, placement=placement, service=ServiceSettings(pooled=pooled)
        )
        async with facade_of(settings) as live:
            started = time.monotonic()
            await _batch(live, 2, "k-4", {"image": IMAGE, "owner": "run-1"})
            assert time.monotonic() - started < 2.0
            assert _claims(live, "failed") == 1
    finally:
        await server.close()


async def test_a_pool_pod_on_a_cordoned_node_is_never_handed_out(
    facade_of: FacadeOf, client: KubeClient, leader: Controller, cluster: EmbeddedCluster
) -> None:
    async with facade_of(SETTINGS) as live:
        (name,) = await _pool(client, live, leader, 1)
        await client.patch(NODES, "node-0", {"spec": {"unschedulable": True}})
        await wait_until_async(lambda: _offered(leader) == 0, timeout_s=10)
        sandboxes = await _batch(live, 1, "k-5")
        assert sandboxes[0]["id"] != name and _claims(live, "miss") == 1
        await client.patch(NODES, "node-0", {"spec": {"unschedulable": False}})
        await wait_until_async(lambda: _offered(leader) == 1, timeout_s=10)  # healthy again


async def test_with_pools_off_every_create_is_cold(
    facade_of: FacadeOf, client: KubeClient, leader: Controller, cluster: EmbeddedCluster
) -> None:
    """``--no-service-pooled``: no claims informer, no pooled source; the pool stays."""
    settings = dataclasses.replace(SETTINGS, service=ServiceSettings(pooled=None))
    async with facade_of(settings) as live:
        (name,) = await _pool(client, live, leader, 1)
        (sandbox,) = await _batch(live, 1, "k-6")
        assert sandbox["id"] != name and _offered(leader) == 1
        assert not any(i.name.startswith("claims/") for i in live.facade.informers)
