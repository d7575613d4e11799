"""Pre-placed creation through the facade's own HTTP API, with a real leading controller
(tests/support/placement.py): a batch's pods are created on their nodes (one write each, no
bind); binder mode and a placement that ran out before the create could be sent create
unbound pods that the binder places — no trainer request fails because the fast path did;
members whose placement ran out are asked for once more (the same node)."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from controller.app import Controller
from facade.app import FacadeSettings
from facade.service import ServiceSettings
from facade.window import WindowSizing
from kube import PODS, KubeClient
from simcluster.embedded import EmbeddedCluster
from tests.support.controller import CONTROLLER_USER, cluster_of, writes_by
from tests.support.facade import NAMESPACE, LiveFacade, live_facade
from tests.support.kube import FAST
from tests.support.metrics import sample
from tests.support.placement import (
    LEASE,
    SPEC,
    create_batch,
    placing_controller,
    rejected,
    serving,
    two_nodes,
)
from tests.support.wait import wait_until_async

pytestmark = pytest.mark.anyio


@pytest.fixture
def cluster() -> Iterator[EmbeddedCluster]:
    with two_nodes() as c:
        yield c


@pytest.fixture
async def leader(cluster: EmbeddedCluster) -> AsyncIterator[Controller]:
    async with placing_controller(cluster, "a") as c:
        await wait_until_async(lambda: serving(c), timeout_s=10)
        yield c


def creates(live: LiveFacade, placement: str) -> float:
    return sample(
        live.facade.metrics.registry, "sandman_facade_pod_creates_total", placement=placement
    )


async def pods_of(client: KubeClient) -> list[dict]:
    return (await client.list(PODS, NAMESPACE))["items"]


@pytest.mark.parametrize(
    ("creation", "max_valid_for_s", "expected"),
    [
        ("pre-placed", 2.0, "pre-placed"),
        ("pre-placed", 1e-6, "unbound-late"),
        ("binder", 2.0, "unbound"),
    ],
)
async def test_a_batch_is_created_on_its_nodes_or_unbound_for_the_binder(
    cluster: EmbeddedCluster,
    leader: Controller,
    tmp_path: Path,
    creation: str,
    max_valid_for_s: float,
    expected: str,
) -> None:
    placement = dataclasses.replace(LEASE, max_valid_for_s=max_valid_for_s)
    settings = FacadeSettings(port=0, client=FAST, creation=creation, placement=placement)
    async with (
        live_facade(cluster.kubeconfig, settings, tmp_path) as live,
        await KubeClient.connect(FAST, kubeconfig=str(cluster.kubeconfig)) as client,
    ):
        await create_batch(live, 10)
        assert creates(live, expected) == 10
        pods = await wait_until_async(lambda: _all_bound(client), timeout_s=10)
        assert rejected(pods) == 0
    binds = writes_by(cluster, CONTROLLER_USER, resource="pods", subresource="binding")
    assert binds == (0 if expected == "pre-placed" else 10)


async def _all_bound(client: KubeClient) -> list[dict]:
    pods = await pods_of(client)
    assert len(pods) == 10 and all(p["spec"].get("nodeName") for p in pods)
    return pods


async def test_a_batch_queued_at_the_client_still_goes_pre_placed(
    cluster: EmbeddedCluster, leader: Controller, tmp_path: Path
) -> None:
    """16 creates at 8/s take 2 s to get their turn, longer than a placement lives (1 s):
    the facade waits for its turn before asking, so none runs out."""
    client = dataclasses.replace(FAST, qps=8, burst=1)
    settings = FacadeSettings(port=0, client=client, placement=LEASE)
    async with live_facade(cluster.kubeconfig, settings, tmp_path) as live:
        async with live.http.post("/v1/batches", json={"spec": SPEC, "count": 16}) as r:
            assert r.status == 201, await r.text()
        assert (creates(live, "pre-placed"), creates(live, "unbound-late")) == (16, 0)


async def test_batches_behind_a_queueing_server_ask_only_when_they_can_be_sent(
    tmp_path: Path,
) -> None:
    """The server admits the facade's writes at 10/s and queues the rest (no 429): 20
    batches of 2 sent at once. Asked all at once, the placements of the later batches run
    out while their first create waits in the server's queue (~2 s for the last); the send
    window asks for a batch's placements only when it has room (4 creates: ≤ 0.4 s), so
    every pod still goes on its node — and, with 4 of 40 at most in flight, in time."""
    flow = {
        "levels": {"slow": {"mutating": {"rate": 10, "burst": 1}, "max_queue_wait_s": 10}},
        "schemas": [{"name": "facade", "level": "slow", "users": ["admin"], "precedence": 1}],
    }
    base = cluster_of(2, cpu="16", foreign=0.0)
    settings = dataclasses.replace(base, server=dataclasses.replace(base.server, flowcontrol=flow))
    placement = dataclasses.replace(LEASE, max_valid_for_s=1.0)
    facade = FacadeSettings(
        port=0,
        client=FAST,
        placement=placement,
        service=ServiceSettings(preplaced_window=WindowSizing(maximum=4, minimum=4)),
    )
    with EmbeddedCluster(settings) as cluster:
        async with (
            placing_controller(cluster, "a") as leader,
            live_facade(cluster.kubeconfig, facade, tmp_path) as live,
        ):
            await wait_until_async(lambda: serving(leader), timeout_s=10)
            async with asyncio.TaskGroup() as tg:
                for _ in range(20):
                    tg.create_task(create_batch(live, 2))
            assert (creates(live, "pre-placed"), creates(live, "unbound-late")) == (40, 0)


@contextlib.asynccontextmanager
async def slow_server_facade(tmp_path: Path) -> AsyncIterator[tuple[EmbeddedCluster, LiveFacade]]:
    """A server that admits the facade's writes at 10/s (queueing the rest, no 429), a
    leader, and a facade with 6 connections (its watches use others) and 0.25 s placements:
    of 12 creates at once, those still waiting for a connection when their placement runs
    out are not sent."""
    flow = {
        "levels": {"slow": {"mutating": {"rate": 10, "burst": 1}, "max_queue_wait_s": 10}},
        "schemas": [{"name": "facade", "level": "slow", "users": ["admin"], "precedence": 1}],
    }
    base = cluster_of(2, cpu="16", foreign=0.0)
    settings = dataclasses.replace(base, server=dataclasses.replace(base.server, flowcontrol=flow))
    facade = FacadeSettings(
        port=0,
        client=dataclasses.replace(FAST, max_connections=6),
        placement=dataclasses.replace(LEASE, max_valid_for_s=0.25),
    )
    with EmbeddedCluster(settings) as cluster:
        async with (
            placing_controller(cluster, "a") as leader,
            live_facade(cluster.kubeconfig, facade, tmp_path) as live,
        ):
            await wait_until_async(lambda: serving(leader), timeout_s=10)
            yield cluster, live


def assert_placed_again(live: LiveFacade, n: int) -> float:
    """Every create pre-placed or late twice, and some that ran out placed the second time;
    returns the creates that went unbound after missing twice."""
    ran_out = sample(live.facade.metrics.registry, "sandman_facade_placements_ran_out_total")
    late_twice = creates(live, "unbound-late")
    assert creates(live, "pre-placed") + late_twice == n
    assert ran_out > late_twice  # some ran out, and went on a node the second time
    return late_twice


async def test_members_whose_placement_ran_out_are_placed_again(tmp_path: Path) -> None:
    """Of a batch of 12 (slow_server_facade), the members that missed their placement are
    asked for once more, all in one call, and then go on their nodes; only a create late
    twice is created unbound (one write saved for each of the others)."""
    async with slow_server_facade(tmp_path) as (cluster, live):
        await create_batch(live, 12)
        late_twice = assert_placed_again(live, 12)
        binds = writes_by(cluster, CONTROLLER_USER, resource="pods", subresource="binding")
        assert binds <= late_twice


async def test_binder_mode_creates_are_bounded_in_flight(
    cluster: EmbeddedCluster, leader: Controller, tmp_path: Path
) -> None:
    """Unbound creates go through a window too (about what the server's queue holds): 10
    batches of 2 sent at once with room for 4 are never more than 4 in flight, and all
    are created."""
    settings = FacadeSettings(
        port=0,
        client=FAST,
        creation="binder",
        placement=LEASE,
        service=ServiceSettings(unbound_in_flight=4),
    )
    async with live_facade(cluster.kubeconfig, settings, tmp_path) as live:
        async with asyncio.TaskGroup() as tg:
            for _ in range(10):
                tg.create_task(create_batch(live, 2))
        assert creates(live, "unbound") == 20
        assert live.facade.service is not None
        window = live.facade.service.unbound.window
        assert window.peak == 4 and window.in_flight == 0


async def test_a_single_create_whose_placement_ran_out_is_placed_again(tmp_path: Path) -> None:
    """As for a batch's members: 12 single creates at once (slow_server_facade); the ones
    that missed are asked for once more before any goes unbound."""
    async with slow_server_facade(tmp_path) as (_, live):

        async def one() -> None:
            async with live.http.post("/v1/sandboxes", json=SPEC) as r:
                assert r.status == 201, await r.text()

        async with asyncio.TaskGroup() as tg:
            for _ in range(12):
                tg.create_task(one())
        assert_placed_again(live, 12)


async def test_the_send_window_follows_the_granted_rate(tmp_path: Path) -> None:
    """The server grants the facade's writes 40/s and queues at most 0.25 s of them (10);
    the rest are answered 429. A first batch of 30, sent whole (the grant not known yet),
    meets that queue and draws 429s; from then on the facade holds 0.2 s of the grant it
    saw in flight (8 creates): a batch of 20 is asked for and sent in parts of at most 8,
    each after the one before was answered, so the server's queue holds every create sent
    and none is refused — sent whole (a fixed window of 200, or one sized from the
    client's own lowered rate, still ~250/s), its 20 creates met a queue of 10 again."""
    flow = {
        "levels": {"slow": {"mutating": {"rate": 40, "burst": 1}, "max_queue_wait_s": 0.25}},
        "schemas": [{"name": "facade", "level": "slow", "users": ["admin"], "precedence": 1}],
    }
    base = cluster_of(2, cpu="16", foreign=0.0)
    cluster_settings = dataclasses.replace(
        base, server=dataclasses.replace(base.server, flowcontrol=flow)
    )
    sizing = WindowSizing(maximum=200, minimum=1, queue_s=0.2)
    settings = FacadeSettings(
        port=0,
        client=dataclasses.replace(FAST, qps=1000, burst=1000),
        placement=LEASE,
        service=ServiceSettings(preplaced_window=sizing),
    )
    with EmbeddedCluster(cluster_settings) as cluster:
        async with (
            placing_controller(cluster, "a") as leader,
            live_facade(cluster.kubeconfig, settings, tmp_path) as live,
        ):
            await wait_until_async(lambda: serving(leader), timeout_s=10)
            body = {"spec": SPEC, "count": 30}
            async with live.http.post("/v1/batches", json=body) as r:
                assert r.status == 201, await r.text()
            refused = writes_by(cluster, "admin", resource="pods", code="429")
            assert refused > 0  # the grant shown
            placed = creates(live, "pre-placed")
            await create_batch(live, 20)
            assert creates(live, "pre-placed") - placed == 20
            assert writes_by(cluster, "admin", resource="pods", code="429") == refused
            service = live.facade.service
            assert service is not None and service.preplaced is not None
            window = service.preplaced.window
            assert window.capacity <= 9 and window.in_flight == 0
