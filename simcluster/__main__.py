"""Command line: ``python -m simcluster up --profile dev`` and friends.

``up`` starts the API server and the profile's kubelets, prints the kubeconfig paths and a
status line every few seconds (nodes, pods by phase, API requests), and on Ctrl-C (SIGINT or
SIGTERM) stops everything it started — kubelets, pod processes, the server — before exiting.
``fault`` injects a fault into a running cluster through its admin endpoint; ``profiles``
lists the built-in profiles.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import json
import signal
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import aiohttp
import yaml

from simcluster.apiserver.local import LocalClient
from simcluster.apiserver.rbac import AUTHORIZATION_MODES
from simcluster.cluster import ADMIN, Cluster
from simcluster.errors import SimclusterError
from simcluster.profile import builtin_profiles, load_profile

__all__ = ["main"]


def _say(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


async def _status_line(cluster: Cluster) -> str:
    client = LocalClient(cluster.server.dispatcher, ADMIN)
    pods = await client.request("list", "pods")
    phases = Counter((p.get("status") or {}).get("phase", "?") for p in pods["items"])
    nodes = len(cluster.kubelets)
    text = ", ".join(f"{k}={v}" for k, v in sorted(phases.items())) or "none"
    return f"nodes={nodes} pods: {text} resourceVersion={cluster.server.store.rv}"


async def _up(args: argparse.Namespace) -> int:
    # The store holds ~50 small dicts per pod: with Python's default thresholds, young
    # collections run every 700 allocations and full ones rescan the whole store. A server
    # process that only ever grows its heap runs them far less often.
    gc.set_threshold(50_000, 20, 100)
    overrides = dict(o.split("=", 1) for o in args.set or [])
    if args.nodes is not None:
        overrides["nodes.count"] = str(args.nodes)
    if args.authorization is not None:
        overrides["apiserver.authorization"] = args.authorization
    settings = load_profile(args.profile, overrides)
    if args.port:
        from dataclasses import replace

        settings = replace(settings, server=replace(settings.server, port=args.port))
    workdir = Path(args.workdir) if args.workdir else Path(tempfile.mkdtemp(prefix="simcluster-"))
    workdir.mkdir(parents=True, exist_ok=True)
    cluster = Cluster(settings, workdir)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    _say(f"starting profile {args.profile}: {settings.nodes} nodes, runtime {settings.runtime}")
    try:
        await cluster.start(progress=_say)
        _say(f"kubeconfig: {cluster.kubeconfig}")
        for name, path in cluster.kubeconfigs.items():
            _say(f"kubeconfig ({name}): {path}")
        _say(f"export KUBECONFIG={cluster.kubeconfig}   # Ctrl-C stops the cluster")
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(args.status_every):
                    await stop.wait()
            if not stop.is_set():
                _say(await _status_line(cluster))
    finally:
        _say("stopping: kubelets, pod processes, API server")
        await cluster.stop()
        _say("stopped")
    return 0


async def _fault(args: argparse.Namespace, config: dict[str, Any]) -> int:
    server = config["clusters"][0]["cluster"]["server"]
    token = config["users"][0]["user"]["token"]
    body: dict[str, Any] = {"kind": args.kind}
    for kv in args.params:
        key, _, value = kv.partition("=")
        body[key] = yaml.safe_load(value)
    ssl_ctx = None
    ca = config["clusters"][0]["cluster"].get("certificate-authority-data")
    if ca:
        import base64
        import ssl

        ssl_ctx = ssl.create_default_context(cadata=base64.b64decode(ca).decode())
    async with (
        aiohttp.ClientSession(headers={"Authorization": f"Bearer {token}"}) as session,
        session.post(
            f"{server}/admin/faults", json=body, ssl=ssl_ctx if ssl_ctx else False
        ) as resp,
    ):
        print(json.dumps(await resp.json()))
        return 0 if resp.status == 200 else 1


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m simcluster", description="A KWOK-style simulated Kubernetes cluster."
    )
    sub = p.add_subparsers(dest="command", required=True)
    up = sub.add_parser("up", help="start a cluster from a profile; Ctrl-C stops it")
    up.add_argument(
        "--profile",
        default="dev",
        help=f"built-in ({', '.join(builtin_profiles())}) or a YAML path",
    )
    up.add_argument("--workdir", help="where kubeconfigs and pod logs go (default: a new temp dir)")
    up.add_argument("--port", type=int, default=0, help="API server port (default: any free port)")
    up.add_argument("--nodes", type=int, help="override the profile's node count")
    up.add_argument(
        "--authorization",
        choices=AUTHORIZATION_MODES,
        help="rbac: enforce RBAC (and the node rules) as kube-apiserver does; "
        "always-allow: every authenticated user may do everything (the profile's default)",
    )
    up.add_argument(
        "--set",
        action="append",
        metavar="KEY=VALUE",
        help="override a profile value, e.g. nodes.cpu=8",
    )
    up.add_argument("--status-every", type=float, default=5.0, help="seconds between status lines")
    fault = sub.add_parser("fault", help="inject a fault into a running cluster")
    fault.add_argument("--kubeconfig", required=True, help="an admin kubeconfig written by `up`")
    fault.add_argument(
        "kind",
        help="api-errors, latency, drop-watches, expire-watches, clear, "
        "node-not-ready, node-delete, kubelet-pause, evict",
    )
    fault.add_argument(
        "params",
        nargs="*",
        metavar="KEY=VALUE",
        help="e.g. node=node-3, or verb=create rate=0.1 code=429, or rate=0.05 "
        "code=[429,500] user=system:serviceaccount:sandman-system:sandman-controller",
    )
    sub.add_parser("profiles", help="list the built-in profiles")
    return p


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        if args.command == "profiles":
            for name in builtin_profiles():
                print(f"{name}: {load_profile(name).nodes} nodes")
            return 0
        if args.command == "fault":
            config = yaml.safe_load(Path(args.kubeconfig).read_text())
            return asyncio.run(_fault(args, config))
        return asyncio.run(_up(args))
    except SimclusterError as e:
        print(f"simcluster: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
