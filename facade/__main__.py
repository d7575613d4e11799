"""``python -m facade``: run the trainer-facing HTTP facade (docs/facade.md).

Prints ``facade listening on <url>`` once it serves; ``/readyz`` turns 200 when its watch
caches have synced. SIGTERM/SIGINT stop it cleanly (in-flight requests are cut: trainers
retry, every operation is safe to repeat).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys
from dataclasses import replace

from .app import CREATION_MODES, Facade, FacadeSettings
from .config import ConfigError, load_config

__all__ = ["main", "parse_settings"]


def _parser() -> argparse.ArgumentParser:
    """Every default comes from ``FacadeSettings()``: flags and library cannot disagree."""
    d = FacadeSettings()
    p = argparse.ArgumentParser(prog="python -m facade", description=__doc__)
    p.add_argument(
        "--config", required=True, help="facade YAML (secret, delivery, classes, tenants)"
    )
    p.add_argument("--kubeconfig", help="kubeconfig path (default: $KUBECONFIG, in-cluster)")
    p.add_argument("--context", help="kubeconfig context")
    p.add_argument("--host", default=d.host, help="listen address (0.0.0.0 in a pod)")
    p.add_argument("--port", type=int, default=d.port, help="0: any free port")
    p.add_argument("--qps", type=float, default=d.client.qps, help="client-side API requests/s")
    p.add_argument("--burst", type=int, default=d.client.burst)
    p.add_argument("--no-pacer", action="store_true",
                   help="fixed --qps: no adaptive pacing (kube/ratelimit.py)")  # fmt: skip
    p.add_argument("--max-body-bytes", type=int, default=d.max_body_bytes)
    lease = f"{d.placement.lease_namespace}/{d.placement.lease_name}"
    p.add_argument("--creation", choices=CREATION_MODES, default=d.creation,
                   help="pre-placed: nodeName on create from the leader's placements "
                   "(1 write); binder: unbound pods, bound by the controller (2)")  # fmt: skip
    p.add_argument("--placement-url", default=d.placement.url,
                   help="a controller without election: its URL (no Lease)")  # fmt: skip
    p.add_argument("--controller-lease", default=lease,
                   help="namespace/name of the controller's election Lease")  # fmt: skip
    p.add_argument("--leader-wait-s", type=float, default=d.placement.leader_wait_s,
                   help="how long a placement ask waits for a missing leader before its pods "
                   "go unbound; keep it above the controller's lease duration plus 1 s, "
                   "0: never wait")  # fmt: skip
    p.add_argument("--log-level", default="INFO")
    return p


async def _run(settings: FacadeSettings, config_path: str) -> int:
    try:
        config = load_config(config_path)
    except ConfigError as e:
        print(f"facade: {e}", file=sys.stderr)
        return 2
    facade = Facade(settings, config)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        await facade.start()
        print(f"facade listening on {facade.url}", flush=True)
        await stop.wait()
    finally:
        await facade.stop()
    return 0


def parse_settings(argv: list[str] | None = None) -> tuple[FacadeSettings, str, str]:
    """(settings, config path, log level) from the command line."""
    parser = _parser()
    args = parser.parse_args(argv)
    base = FacadeSettings()
    lease_ns, _, lease_name = args.controller_lease.partition("/")
    if not lease_ns or not lease_name:
        parser.error("--controller-lease must be namespace/name")
    if not args.leader_wait_s >= 0:
        parser.error("--leader-wait-s must be >= 0")
    settings = replace(
        base,
        kubeconfig=args.kubeconfig,
        context=args.context,
        host=args.host,
        port=args.port,
        max_body_bytes=args.max_body_bytes,
        creation=args.creation,
        placement=replace(
            base.placement,
            url=args.placement_url,
            lease_namespace=lease_ns,
            lease_name=lease_name,
            leader_wait_s=args.leader_wait_s,
        ),
        client=replace(
            base.client,
            qps=args.qps,
            burst=args.burst,
            pacer=replace(base.client.pacer, enabled=not args.no_pacer),
        ),
    )
    return settings, args.config, args.log_level


def main(argv: list[str] | None = None) -> int:
    settings, config, level = parse_settings(argv)
    logging.basicConfig(
        level=level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    return asyncio.run(_run(settings, config))


if __name__ == "__main__":
    sys.exit(main())
