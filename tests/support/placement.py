"""A whole controller process object (``controller.app.Controller``: leader election, its
HTTP server with the placement endpoint) in the test's event loop, against an embedded
simcluster, for the tests of pre-placed creation (tests/controller, tests/facade)."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import AsyncIterator
from typing import Any

from controller.app import Controller, ControllerSettings
from controller.leader import ElectionSettings
from controller.placement import PlacementSettings
from kube.placement import PlacementClientSettings
from simcluster.embedded import EmbeddedCluster
from tests.support.kube import FAST
from tests.support.wait import wait_until_async

__all__ = ["LEASE", "PLACEMENT", "placing_controller", "rejected", "serving"]

PLACEMENT = PlacementSettings(valid_for_s=1.0, handover_margin_s=0.5)
#: Where the test controllers' election Lease is, as the facade's placement client sees it.
LEASE = PlacementClientSettings(lease_name="ctl", lease_namespace="default", timeout_s=2.0)


def _settings(cluster: EmbeddedCluster, identity: str) -> ControllerSettings:
    assert cluster.cluster is not None
    return ControllerSettings(
        kubeconfig=str(cluster.cluster.kubeconfigs["controller"]),
        client=dataclasses.replace(FAST, qps=0),
        election=ElectionSettings(
            name=LEASE.lease_name,
            namespace=LEASE.lease_namespace,
            identity=identity,
            lease_duration_s=2.0,
            renew_deadline_s=1.2,
            retry_period_s=0.2,
        ),
        placement=PLACEMENT,
        prepare=None,
        health_port=0,
        progress_interval_s=60,
        freeze_after_sync=False,
    )


@contextlib.asynccontextmanager
async def placing_controller(cluster: EmbeddedCluster, identity: str) -> AsyncIterator[Controller]:
    """A started controller (caches synced, leadership known); stopped cleanly on exit.
    The cluster needs a ``controller`` kubeconfig (tests.support.controller.cluster_of)."""
    controller = Controller(_settings(cluster, identity))
    task = asyncio.create_task(controller.run())
    try:
        await wait_until_async(lambda: controller.ready() or task.done(), timeout_s=10)
        yield controller
    finally:
        controller.stop()
        await asyncio.wait_for(task, 10)


def serving(c: Controller) -> bool:
    """The controller leads and serves placements (its predecessor's waited out)."""
    return c.placement is not None and c.placement.serving


def rejected(pods: list[dict[str, Any]]) -> int:
    """Pods the kubelet refused (OutOfcpu, OutOfpods...): an overcommit."""
    return sum(1 for p in pods if (p.get("status") or {}).get("reason", "").startswith("OutOf"))
