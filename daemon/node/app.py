"""The node agent process: one :class:`~daemon.node.agent.NodeAgent` for this node, its
clients, and ``/healthz`` ``/readyz`` ``/metrics`` on ``health_port``.

The health server is a few lines over ``asyncio.start_server`` rather than aiohttp's: three
GET routes do not justify ~14 MiB of RSS on every node. ``/healthz`` (the liveness probe)
answers 200 while the runtime answered a ListImages within three reconcile intervals, 503
(with the reason) when it did not: a restart may help there. ``/readyz`` (the readiness
probe) fails in those cases too, and also while an API call is refused (403) — a restart
cannot fix RBAC, but an unready DaemonSet pod is what an operator sees in ``kubectl get``,
and its JSON answer names the missing permission: ``{"ready": false, "reason":
"forbidden", "message": ..., "refused": [{"verb", "group", "resource", "namespace"}],
"nodes": [...]}``. :meth:`Readiness.of` makes that answer for any number of agent cores, so
``python -m devstack.agents`` answers its ``/readyz`` the same way, naming the nodes.

:func:`run_until_signalled` is the process's shutdown rule — SIGTERM or SIGINT cancels the
work, whose ``finally`` blocks close what it opened — for ``python -m daemon.node`` and for
``python -m devstack.agents`` (every simulated node's agent core in one process), so the two
stop alike.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import signal
import time
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass
from typing import Any

from daemon.node.access import Permission
from daemon.node.agent import NodeAgent
from daemon.node.cri import ImageClient
from daemon.node.metrics import AgentMetrics
from daemon.node.settings import AgentSettings
from kube.light import LightClient
from kube.settings import ClientSettings

__all__ = ["AgentProcess", "Readiness", "run_until_signalled", "serve_health"]

log = logging.getLogger("daemon.node")


@dataclass(frozen=True, slots=True)
class Readiness:
    """``/readyz``'s answer. ``reason``: ``ok``, ``starting``, ``runtime_unreachable`` or
    ``forbidden`` (then ``refused`` lists the permissions and ``nodes`` the nodes whose
    cores hold one)."""

    ready: bool
    reason: str
    message: str
    refused: tuple[Permission, ...] = ()
    nodes: tuple[str, ...] = ()

    @classmethod
    def of(cls, cores: Sequence[NodeAgent], health: tuple[bool, str], started: bool) -> Readiness:
        """The answer for ``cores`` (one in the agent process, every node's in
        devstack.agents), given the process's ``health`` (``healthy()``) and whether it has
        ``started`` (reconciled).

        A held refusal wins over ``starting`` and ``runtime_unreachable``: it is the cause
        an operator can act on, and a plan read refused at start comes before the first
        reconcile (the runtime's state is then appended to the message)."""
        held: dict[Permission, tuple[str, list[str]]] = {}
        for core in cores:
            for permission, message in core.client.refused.items():
                held.setdefault(permission, (message, []))[1].append(core.settings.node_name)
        ok, text = health
        if held:
            listed = "; ".join(f"{p} ({_few(nodes)}): {m}" for p, (m, nodes) in held.items())
            also = "" if ok else f"; and: {text}"
            nodes = tuple(sorted({n for _, names in held.values() for n in names}))
            return cls(False, "forbidden", f"forbidden (403): {listed}{also}", tuple(held), nodes)
        if not ok:
            return cls(False, "runtime_unreachable" if started else "starting", text)
        return cls(True, "ok", "ok")

    def body(self) -> bytes:
        refused = [p.as_dict() for p in self.refused]
        doc = {"ready": self.ready, "reason": self.reason, "message": self.message}
        return json.dumps({**doc, "refused": refused, "nodes": list(self.nodes)}).encode()


def _few(nodes: Sequence[str], shown: int = 3) -> str:
    """``node-0, node-1, node-2 and 397 more``: a message stays short on 400 nodes."""
    more = f" and {len(nodes) - shown} more" if len(nodes) > shown else ""
    return ", ".join(nodes[:shown]) + more


class AgentProcess:
    def __init__(self, settings: AgentSettings) -> None:
        self.settings = settings
        self.metrics = AgentMetrics()
        self.agent: NodeAgent | None = None
        self.health_url = ""

    def healthy(self) -> tuple[bool, str]:
        agent = self.agent
        if agent is None or agent.reconciles == 0:
            return False, "starting"
        age = time.monotonic() - agent.last_reconcile
        if age > 3 * self.settings.reconcile_interval_s:
            return False, f"no answer from the container runtime for {age:.0f} s"
        return True, "ok"

    def readiness(self) -> Readiness:
        agent = self.agent
        started = agent is not None and agent.reconciles > 0
        return Readiness.of([agent] if agent is not None else [], self.healthy(), started)

    async def run(self) -> None:
        s = self.settings
        client_settings = ClientSettings(qps=s.qps, burst=s.burst, user_agent=s.component)
        async with await LightClient.connect(client_settings, kubeconfig=s.kubeconfig) as client:
            images = ImageClient(s.cri_socket)
            self.agent = NodeAgent(s, client, images, self.metrics)
            server = await serve_health(
                s.health_host, s.health_port, self.healthy, self.metrics, self.readiness
            )
            host, port = server.sockets[0].getsockname()[:2]
            self.health_url = f"http://{host}:{port}"
            routes = "/healthz, /readyz and /metrics"
            log.info("node agent for %s: %s on %s", s.node_name, routes, self.health_url)
            try:
                await self.agent.run()
            finally:
                server.close()
                await server.wait_closed()
                await images.close()


async def run_until_signalled(work: Coroutine[Any, Any, object]) -> int:
    """Run ``work`` until it returns or SIGTERM/SIGINT cancels it; the exit code, 0 (an
    exception of ``work`` propagates)."""
    task = asyncio.create_task(work)
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, task.cancel)
    with contextlib.suppress(asyncio.CancelledError):
        await task
    return 0


async def serve_health(
    host: str,
    port: int,
    healthy: Callable[[], tuple[bool, str]],
    metrics: AgentMetrics,
    readiness: Callable[[], Readiness],
) -> asyncio.Server:
    """``/healthz`` from ``healthy()``, ``/readyz`` from ``readiness()`` and ``/metrics``
    from ``metrics`` on ``host:port``."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            async with asyncio.timeout(5):
                head = await reader.readuntil(b"\r\n\r\n")
            path = head.split(b" ", 2)[1].split(b"?", 1)[0] if head.count(b" ") >= 2 else b""
            if path == b"/healthz":
                ok, text = healthy()
                status, body, ctype = (200 if ok else 503), text.encode(), "text/plain"
            elif path == b"/readyz":
                answer = readiness()
                status, body = (200 if answer.ready else 503), answer.body()
                ctype = "application/json"
            elif path == b"/metrics":
                status, body, ctype = 200, metrics.render(), "text/plain; version=0.0.4"
            else:
                status, body, ctype = 404, b"not found", "text/plain"
            phrase = {200: "OK", 404: "Not Found", 503: "Service Unavailable"}[status]
            writer.write(
                f"HTTP/1.1 {status} {phrase}\r\nContent-Type: {ctype}\r\n"
                f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
                + body
            )
            await writer.drain()
        except (OSError, TimeoutError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            pass
        finally:
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()

    return await asyncio.start_server(handle, host, port)
