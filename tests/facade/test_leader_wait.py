"""A placement ask that finds no leader waits for one (kube/placement.py,
``leader_wait_s``), through the facade's own HTTP API with real controllers: a leader
change shorter than the bound costs no unbound create; a controller that is gone for good
costs each batch at most the bound once — then the pods go unbound at once, as before."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Iterator
from pathlib import Path

import pytest

from facade.app import FacadeSettings
from simcluster.embedded import EmbeddedCluster
from tests.support.controller import CONTROLLER_USER, server_requests, writes_by
from tests.support.facade import LiveFacade, live_facade
from tests.support.kube import FAST
from tests.support.metrics import sample
from tests.support.placement import (
    LEASE,
    create_batch,
    placing_controller,
    serving,
    two_nodes,
)
from tests.support.wait import wait_until_async

pytestmark = pytest.mark.anyio


@pytest.fixture
def cluster() -> Iterator[EmbeddedCluster]:
    with two_nodes() as c:
        yield c


def counted(live: LiveFacade) -> dict[str, float]:
    m = live.facade.metrics
    return {
        "pre-placed": sample(
            m.registry, "sandman_facade_pod_creates_total", placement="pre-placed"
        ),
        "unbound": sample(m.registry, "sandman_facade_pod_creates_total", placement="unbound"),
        "answered": sample(m.registry, "sandman_facade_placement_waits_total", outcome="answered"),
        "gave_up": sample(m.registry, "sandman_facade_placement_waits_total", outcome="gave_up"),
    }


async def test_a_leader_change_within_the_bound_costs_no_unbound_create(
    cluster: EmbeddedCluster, tmp_path: Path
) -> None:
    """The leader stops (its standby takes over, then waits out its predecessor's
    placements: ~1.5 s of refused asks); a batch sent the moment it stopped waits for the
    new leader and goes on its nodes — one write per sandbox, no bind."""
    settings = FacadeSettings(port=0, client=FAST, placement=LEASE)
    async with (
        live_facade(cluster.kubeconfig, settings, tmp_path) as live,
        placing_controller(cluster, "b") as b,
        placing_controller(cluster, "a") as a,
    ):
        await wait_until_async(lambda: serving(a) or serving(b), timeout_s=10)
        first, second = (a, b) if serving(a) else (b, a)
        await create_batch(live, 4)  # the facade knows the leader
        first.stop()
        await create_batch(live, 8)
        assert counted(live) == {"pre-placed": 12, "unbound": 0, "answered": 1, "gave_up": 0}
        assert serving(second)
    assert writes_by(cluster, CONTROLLER_USER, resource="pods", subresource="binding") == 0


async def test_a_controller_gone_for_good_stalls_a_batch_at_most_the_bound_once(
    cluster: EmbeddedCluster, tmp_path: Path
) -> None:
    """Before any leader answered, a batch is created unbound at once (no failover to wait
    out). The only controller then stops for good: the next batch waits ``leader_wait_s``
    (1 s here) and is created unbound; the ones after it, the leader missing for longer
    than the bound, fall back at once."""
    placement = dataclasses.replace(LEASE, leader_wait_s=1.0, leader_retry_s=0.2)
    settings = FacadeSettings(port=0, client=FAST, placement=placement)
    async with live_facade(cluster.kubeconfig, settings, tmp_path) as live:
        await create_batch(live, 2)
        assert counted(live) == {"pre-placed": 0, "unbound": 2, "answered": 0, "gave_up": 0}
        async with placing_controller(cluster, "a") as a:
            await wait_until_async(lambda: serving(a), timeout_s=10)
            await create_batch(live, 2)
        assert counted(live) == {"pre-placed": 2, "unbound": 2, "answered": 0, "gave_up": 0}
        took = await create_batch(live, 2)
        assert took >= placement.leader_wait_s - placement.leader_retry_s
        assert counted(live) == {"pre-placed": 2, "unbound": 4, "answered": 0, "gave_up": 1}
        await asyncio.gather(create_batch(live, 2), create_batch(live, 2))
        assert counted(live) == {"pre-placed": 2, "unbound": 8, "answered": 0, "gave_up": 1}


def lease_reads(cluster: EmbeddedCluster) -> float:
    """GETs of the controller's Lease by anyone but the controllers (the facade's reads)."""
    return sum(
        v
        for labels, v in server_requests(cluster)
        if labels["verb"] == "get"
        and labels["resource"] == "leases"
        and labels["user"] != CONTROLLER_USER
    )


async def test_batches_waiting_for_a_leader_read_its_lease_once_per_retry(
    cluster: EmbeddedCluster, tmp_path: Path
) -> None:
    """Twelve batches wait out a missing leader together: the Lease is read at most about
    once per ``leader_retry_s`` over all of them. A read forced by every failed ask (one
    in flight at a time, shared) read it about twice as often: 18 against 9 here."""
    placement = dataclasses.replace(LEASE, leader_wait_s=1.0, leader_retry_s=0.1)
    settings = FacadeSettings(port=0, client=FAST, placement=placement)
    async with live_facade(cluster.kubeconfig, settings, tmp_path) as live:
        async with placing_controller(cluster, "a") as a:
            await wait_until_async(lambda: serving(a), timeout_s=10)
            await create_batch(live, 1)
        before = lease_reads(cluster)
        await asyncio.gather(*(create_batch(live, 1) for _ in range(12)))
        assert counted(live)["gave_up"] == 12
        rounds = placement.leader_wait_s / placement.leader_retry_s
        assert lease_reads(cluster) - before <= rounds + 3
