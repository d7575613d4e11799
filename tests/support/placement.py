"""A whole controller process object (``controller.app.Controller``: leader election, its
HTTP server with the placement endpoint) in the test's event loop, against an embedded
simcluster, for the tests of pre-placed creation (tests/controller, tests/facade)."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import time
from collections.abc import AsyncIterator
from typing import Any

from controller.app import Controller, ControllerSettings
from controller.leader import ElectionSettings
from controller.placement import PlacementSettings
from controller.placement_auth import PlacementAuthSettings
from kube.placement import PlacementClientSettings
from simcluster.embedded import EmbeddedCluster
from tests.support.controller import cluster_of
from tests.support.facade import LiveFacade
from tests.support.kube import FAST
from tests.support.wait import wait_until_async

__all__ = [
    "FACADE_USER",
    "LEASE",
    "PLACEMENT",
    "SPEC",
    "create_batch",
    "placing_controller",
    "rejected",
    "serving",
    "two_nodes",
]

PLACEMENT = PlacementSettings(valid_for_s=1.0, handover_margin_s=0.5)
#: Where the test controllers' election Lease is, as the facade's placement client sees it.
LEASE = PlacementClientSettings(lease_name="ctl", lease_namespace="default", timeout_s=2.0)
#: Whom the placement endpoint admits: the identity of the admin kubeconfig the tests'
#: facades run with (simcluster.cluster.ADMIN).
FACADE_USER = "admin"
#: The sandbox every batch of these tests asks for.
SPEC = {"image": "registry.local/task:1", "owner": "run-1"}


def two_nodes() -> EmbeddedCluster:
    """Two nodes of 4 CPUs and no other tenant's pods: room for every test batch."""
    return EmbeddedCluster(cluster_of(2, cpu="4", foreign=0.0))


async def create_batch(live: LiveFacade, count: int) -> float:
    """A batch of ``count`` through the facade's HTTP API, all created: the seconds it took."""
    started = time.monotonic()
    async with live.http.post("/v1/batches", json={"spec": SPEC, "count": count}) as r:
        assert r.status == 201, await r.text()
        assert len((await r.json())["sandboxes"]) == count
    return time.monotonic() - started


def _settings(cluster: EmbeddedCluster, identity: str) -> ControllerSettings:
    assert cluster.cluster is not None
    return ControllerSettings(
        kubeconfig=str(cluster.cluster.kubeconfigs["controller"]),
        client=dataclasses.replace(FAST, qps=0),
        election=ElectionSettings(
            name=LEASE.lease_name,
            namespace=LEASE.lease_namespace,
            identity=identity,
            # Long enough that a loaded CI machine never loses a leader mid-test (a 1.2 s
            # renew deadline once did: a batch's last member went unbound). A clean stop
            # releases the Lease, so the tests' leader changes still take one retry period.
            lease_duration_s=10.0,
            renew_deadline_s=8.0,
            retry_period_s=0.2,
        ),
        placement=PLACEMENT,
        # The tests' facades and placement clients run with the admin kubeconfig.
        placement_auth=PlacementAuthSettings(users=FACADE_USER),
        prepare=None,
        health_port=0,
        progress_interval_s=60,
        freeze_after_sync=False,
    )


@contextlib.asynccontextmanager
async def placing_controller(
    cluster: EmbeddedCluster, identity: str, **overrides: Any
) -> AsyncIterator[Controller]:
    """A started controller (caches synced, leadership known); stopped cleanly on exit.
    The cluster needs a ``controller`` kubeconfig (tests.support.controller.cluster_of);
    ``overrides``: ControllerSettings fields to set."""
    controller = Controller(dataclasses.replace(_settings(cluster, identity), **overrides))
    task = asyncio.create_task(controller.run())
    try:
        await wait_until_async(lambda: controller.ready() or task.done(), timeout_s=10)
        yield controller
    finally:
        controller.stop()
        async with asyncio.timeout(10):
            await task


def serving(c: Controller) -> bool:
    """The controller leads and serves placements (its predecessor's waited out)."""
    return c.placement is not None and c.placement.serving


def rejected(pods: list[dict[str, Any]]) -> int:
    """Pods the kubelet refused (OutOfcpu, OutOfpods...): an overcommit."""
    return sum(1 for p in pods if (p.get("status") or {}).get("reason", "").startswith("OutOf"))
