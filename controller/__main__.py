"""``python -m controller``: run the Sandman controller (see docs/controller.md).

Logs progress every ``--progress-interval`` seconds; SIGTERM/SIGINT release the leader lease
and exit 0.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys

from controller.app import Controller, ControllerSettings, default_identity
from controller.binder import BinderSettings
from controller.gc import GCSettings
from controller.leader import ElectionSettings
from controller.placement import PlacementSettings
from controller.prepare import PreparerSettings
from controller.view import ViewSettings
from kube import ClientSettings
from kube.ratelimit import PacerSettings
from scheduler import SchedulerSettings

__all__ = ["main", "parse_settings"]


def _parser() -> argparse.ArgumentParser:
    """Every default comes from the settings dataclasses (``ControllerSettings()``), so the
    flags, the library and the docs cannot disagree."""
    d, e, prep = ControllerSettings(), ElectionSettings(identity="-"), PreparerSettings()
    p = argparse.ArgumentParser(prog="python -m controller", description=__doc__)
    p.add_argument("--kubeconfig", help="kubeconfig path (default: $KUBECONFIG, in-cluster)")
    p.add_argument("--context", help="kubeconfig context")
    p.add_argument("--scheduler-name", default=d.view.scheduler_name)
    p.add_argument("--namespace", help="bind sandboxes of this namespace only (default: all)")
    p.add_argument("--qps", type=float, default=d.client.qps, help="client-side API requests/s")
    p.add_argument("--burst", type=int, default=d.client.burst)
    p.add_argument("--no-pacer", action="store_true",
                   help="fixed --qps: no adaptive pacing (kube/ratelimit.py)")  # fmt: skip
    p.add_argument("--bind-workers", type=int, default=d.binder.bind_workers)
    p.add_argument(
        "--max-starting-per-node", type=int, default=d.scheduler.max_starting_per_node,
        help="the start-queue cap: pods starting at once per node (default: %(default)s)",
    )  # fmt: skip
    p.add_argument("--terminal-retention", type=float, default=d.gc.terminal_retention_s,
                   help="seconds")  # fmt: skip
    p.add_argument("--pending-deadline", type=float, default=d.gc.pending_deadline_s,
                   help="seconds")  # fmt: skip
    p.add_argument("--gc-qps", type=float, default=d.gc.qps)
    p.add_argument("--max-pulls-per-image", type=int, default=prep.max_pulls_per_image,
                   help="preparation: nodes pulling one image at once, cluster-wide")  # fmt: skip
    p.add_argument("--max-images-per-node", type=int, default=prep.max_images_per_node,
                   help="preparation: images planned on one node at most")  # fmt: skip
    p.add_argument("--spread-images-per-node", type=int, default=prep.spread_images_per_node,
                   help="preparation: spread images over nodes holding fewer (0: off)")  # fmt: skip
    p.add_argument("--no-prepare", action="store_true", help="no image preparation decisions")
    p.add_argument("--no-leader-elect", action="store_true", help="always lead (one replica)")
    p.add_argument("--lease-name", default=e.name)
    p.add_argument("--lease-namespace", default=e.namespace)
    p.add_argument("--identity", default="", help="default: hostname_pid")
    p.add_argument("--lease-duration", type=float, default=e.lease_duration_s)
    p.add_argument("--renew-deadline", type=float, default=e.renew_deadline_s)
    p.add_argument("--retry-period", type=float, default=e.retry_period_s)
    p.add_argument("--health-host", default=d.health_host,
                   help="address of /healthz, /readyz, /metrics (0.0.0.0 in a pod)")  # fmt: skip
    p.add_argument("--health-port", type=int, default=d.health_port, help="0: any free port")
    p.add_argument("--advertise-url", default=d.advertise_url,
                   help="the placement URL for facades (default: the health URL)")  # fmt: skip
    p.add_argument("--placement-valid-for", type=float, default=d.placement.valid_for_s,
                   help="seconds a placement may be used (a new leader waits it out)")  # fmt: skip
    p.add_argument("--progress-interval", type=float, default=d.progress_interval_s)
    p.add_argument(
        "--unbound-client-side",
        action="store_true",
        help="watch all sandboxes and drop bound ones locally, for API servers that cannot "
        "filter spec.nodeName= (simcluster today)",
    )
    p.add_argument("--log-level", default="INFO")
    return p


def parse_settings(argv: list[str] | None = None) -> tuple[ControllerSettings, str]:
    a = _parser().parse_args(argv)
    election = None
    if not a.no_leader_elect:
        election = ElectionSettings(
            name=a.lease_name,
            namespace=a.lease_namespace,
            identity=a.identity or default_identity(),
            lease_duration_s=a.lease_duration,
            renew_deadline_s=a.renew_deadline,
            retry_period_s=a.retry_period,
        )
    settings = ControllerSettings(
        kubeconfig=a.kubeconfig,
        context=a.context,
        client=ClientSettings(
            qps=a.qps, burst=a.burst, pacer=PacerSettings(enabled=not a.no_pacer)
        ),
        view=ViewSettings(
            scheduler_name=a.scheduler_name,
            namespace=a.namespace,
            server_side_unbound=not a.unbound_client_side,
        ),
        binder=BinderSettings(bind_workers=a.bind_workers),
        scheduler=SchedulerSettings(max_starting_per_node=a.max_starting_per_node),
        gc=GCSettings(
            terminal_retention_s=a.terminal_retention,
            pending_deadline_s=a.pending_deadline,
            qps=a.gc_qps,
            burst=max(1, int(a.gc_qps)),
        ),
        prepare=None
        if a.no_prepare
        else PreparerSettings(
            max_pulls_per_image=a.max_pulls_per_image,
            max_images_per_node=a.max_images_per_node,
            spread_images_per_node=a.spread_images_per_node,
        ),
        election=election,
        health_host=a.health_host,
        health_port=a.health_port,
        advertise_url=a.advertise_url,
        placement=PlacementSettings(valid_for_s=a.placement_valid_for),
        progress_interval_s=a.progress_interval,
    )
    return settings, a.log_level


async def _run(settings: ControllerSettings) -> None:
    controller = Controller(settings)
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, controller.stop)
    await controller.run()


def main(argv: list[str] | None = None) -> int:
    settings, level = parse_settings(argv)
    logging.basicConfig(
        level=level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    logging.getLogger("httpx").setLevel(logging.WARNING)
    asyncio.run(_run(settings))
    logging.getLogger("controller").info("stopped")
    return 0


if __name__ == "__main__":
    sys.exit(main())
