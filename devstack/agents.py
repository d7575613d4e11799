"""One node agent per simulated node, all in one process: ``python -m devstack.agents``.

Why one process: a real cluster runs one agent per node (a DaemonSet), each ~50 MiB; 400
agent processes would take 20 GiB on this 24 GiB machine. Here every node gets its own
:class:`daemon.node.agent.NodeAgent` — the production core: its own CRI channel to its
node's socket, its own Lease watch, its own pulls, write bounds and Events — on one event
loop, sharing one API client (one connection pool; the watches have a connection each) and
one metrics registry (counters add up over the nodes). docs/node-agent.md, "Running at
scale", has the measured RSS and CPU.

Its ``/healthz`` is 200 once every core reconciled; its ``/readyz`` is the agent's
(:meth:`daemon.node.app.Readiness.of` over all the cores): 503 ``forbidden`` while any core
holds a refused call, ``refused`` listing the permissions and ``nodes`` the nodes whose
cores hold them — the cores share one client and one identity, but a refusal can still be
one node's (a rule limited by ``resourceNames``, a call only some nodes made).

The socket map is simcluster's ``<workdir>/cri-sockets.json``. Every flag of the node agent
(``python -m daemon.node``: generated from :class:`daemon.node.settings.AgentSettings`) sets
that setting for every agent; the defaults differ where a simulated cluster wants them to
(:func:`simulated_defaults`), and ``--node-name`` is each core's own node.
"""

from __future__ import annotations

import asyncio
import json
import logging
import sys
import time
from dataclasses import replace
from pathlib import Path

from daemon.node.agent import NodeAgent
from daemon.node.app import Readiness, run_until_signalled, serve_health
from daemon.node.cri import ImageClient
from daemon.node.metrics import AgentMetrics
from daemon.node.settings import AgentSettings
from kube.light import LightClient
from kube.settings import ClientSettings
from sandman.base.settings_cli import from_args, parser

__all__ = ["main", "run_agents", "simulated_defaults"]

log = logging.getLogger("devstack.agents")


def simulated_defaults() -> AgentSettings:
    """The agent's defaults, but: any free health port (several stacks on one machine), the
    stack's namespace, warnings only (400 cores log a lot)."""
    return AgentSettings(health_port=0, log_level="WARNING")


async def run_agents(
    base: AgentSettings, sockets: dict[str, str], health_port: int, ready_file: Path | None
) -> None:
    metrics = AgentMetrics()
    # One pool for every agent's requests; watches open their own connections.
    client_settings = ClientSettings(qps=0, burst=0, max_connections=32, user_agent=base.component)
    started = time.monotonic()
    async with await LightClient.connect(client_settings, kubeconfig=base.kubeconfig) as client:
        agents = []
        for node, socket in sorted(sockets.items()):
            settings = replace(base, node_name=node, cri_socket=socket)
            agents.append(NodeAgent(settings, client, ImageClient(socket), metrics))

        def healthy() -> tuple[bool, str]:
            fresh = sum(1 for a in agents if a.reconciles)
            return fresh == len(agents), f"{fresh}/{len(agents)} agents reconciled"

        def readiness() -> Readiness:
            return Readiness.of(agents, healthy(), started=all(a.reconciles for a in agents))

        server = await serve_health(base.health_host, health_port, healthy, metrics, readiness)
        port = server.sockets[0].getsockname()[1]
        try:
            async with asyncio.TaskGroup() as tg:
                for agent in agents:
                    tg.create_task(agent.run())
                while not all(a.reconciles for a in agents):  # noqa: ASYNC110 - a start-up poll
                    await asyncio.sleep(0.2)
                took = time.monotonic() - started
                url = f"http://{base.health_host}:{port}/metrics"
                print(f"agents ready: {len(agents)} nodes in {took:.1f} s, metrics on {url}",
                      flush=True)  # fmt: skip
                if ready_file is not None:
                    ready_file.write_text(json.dumps({"agents": len(agents), "port": port}))
        finally:
            server.close()
            for agent in agents:
                await agent.images.close()


def main(argv: list[str] | None = None) -> int:
    defaults = simulated_defaults()
    p = parser(AgentSettings, prog="python -m devstack.agents", description=__doc__,
               usage="%(prog)s --sockets FILE [options]", defaults=defaults)  # fmt: skip
    p.add_argument("--sockets", required=True, help="simcluster's cri-sockets.json")
    p.add_argument("--ready-file", help="written once every agent reconciled")
    a = p.parse_args(argv)
    base = from_args(AgentSettings, a, p, environ={}, defaults=defaults)  # no downward API here
    logging.basicConfig(
        level=base.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    sockets = json.loads(Path(a.sockets).read_text())
    ready = Path(a.ready_file) if a.ready_file else None
    return asyncio.run(run_until_signalled(run_agents(base, sockets, base.health_port, ready)))


if __name__ == "__main__":
    sys.exit(main())
