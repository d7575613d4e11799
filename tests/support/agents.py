"""The node agent as tests run it: a real ``python -m daemon.node`` process against one
simulated node's CRI socket and the embedded cluster's API server, and what tests read back
(its Lease, its metrics, the node's image cache)."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kube.preparation_contract import AGENT_LEASE_NAMESPACE, lease_name
from simcluster.apiserver import ServerSettings
from simcluster.cluster import ClusterSettings
from simcluster.embedded import EmbeddedCluster
from simcluster.kubelet.images import PullSettings
from simcluster.kubelet.settings import NodeSettings
from tests.support.wait import wait_until

__all__ = [
    "AGENT_NS",
    "AGENT_SA_NS",
    "AgentRun",
    "agent_cluster",
    "metric",
    "run_agent",
    "spawn_agent",
    "stop",
]

AGENT_NS = AGENT_LEASE_NAMESPACE  # where the agents' Leases live
AGENT_SA_NS = "sandman-system"  # where the agents' ServiceAccount is
AGENT_SA = f"{AGENT_SA_NS}/sandman-node-agent"


def agent_cluster(nodes: int = 1, preloaded: tuple[str, ...] = (), **pull: Any) -> ClusterSettings:
    """Nodes serving CRI, with ``pull`` settings (PullSettings fields) for their images."""
    return ClusterSettings(
        server=ServerSettings(bookmark_interval_s=0.5),
        nodes=nodes,
        cri=True,
        node=NodeSettings(pull=PullSettings(**pull), preloaded_images=preloaded),
        service_account_kubeconfigs=(("node-agent", AGENT_SA),),
        namespaces=(AGENT_NS,),
    )


@dataclass
class AgentRun:
    process: subprocess.Popen[bytes]
    node: str
    health_url: str
    lease: str
    log: Path

    def metrics(self) -> str:
        with urllib.request.urlopen(f"{self.health_url}/metrics", timeout=5) as r:
            return str(r.read().decode())

    def healthz(self) -> int:
        try:
            with urllib.request.urlopen(f"{self.health_url}/healthz", timeout=5) as r:
                return int(r.status)
        except urllib.error.HTTPError as e:
            return int(e.code)

    def readyz(self, path: str = "/readyz") -> tuple[int, Any]:
        """The readiness answer: its status and its decoded JSON."""
        try:
            with urllib.request.urlopen(f"{self.health_url}{path}", timeout=5) as r:
                return int(r.status), json.loads(r.read())
        except urllib.error.HTTPError as e:
            return int(e.code), json.loads(e.read())


def metric(text: str, name: str, **labels: str) -> float:
    """The sum of a metric's samples whose labels include ``labels``."""
    total = 0.0
    for line in text.splitlines():
        if not line.startswith(name):
            continue
        head, _, value = line.rpartition(" ")
        sample, _, label_text = head.partition("{")
        if sample != name:
            continue
        if all(f'{k}="{v}"' in label_text for k, v in labels.items()):
            total += float(value)
    return total


@contextlib.contextmanager
def run_agent(
    cluster: EmbeddedCluster, node: str = "node-0", *flags: str, workdir: Path
) -> Iterator[AgentRun]:
    """An agent process for ``node``; stopped (SIGTERM, then SIGKILL) on exit."""
    assert cluster.cluster is not None
    sockets = json.loads((cluster.workdir / "cri-sockets.json").read_text())
    kubeconfig = cluster.cluster.kubeconfigs["node-agent"]
    with spawn_agent(Path(kubeconfig), sockets[node], node, *flags, workdir=workdir) as agent:
        yield agent


@contextlib.contextmanager
def spawn_agent(
    kubeconfig: Path, socket: str, node: str, *flags: str, workdir: Path
) -> Iterator[AgentRun]:
    """An agent process for ``node`` with ``kubeconfig``'s credentials and the runtime at
    ``socket`` (any cluster: the embedded one, a devstack's); stopped on exit."""
    port_file = workdir / f"agent-{node}.log"
    args = [
        sys.executable, "-m", "daemon.node", "--node-name", node, "--namespace", AGENT_NS,
        "--kubeconfig", str(kubeconfig), "--cri-socket", socket,
        "--state-dir", str(workdir / "state"), "--health-port", "0",
        "--reconcile-interval-s", "0.5", "--min-write-interval-s", "0.5",
        "--retry-initial-s", "0.2", "--retry-cap-s", "1", *flags,
    ]  # fmt: skip
    with port_file.open("wb") as log:
        process = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT)
    try:

        def url() -> str | None:
            for line in port_file.read_text().splitlines():
                if "/metrics on " in line:
                    return line.rsplit(" ", 1)[1]
            assert process.poll() is None, port_file.read_text()
            return None

        health = wait_until(url, timeout_s=30, what="the agent's health server")
        yield AgentRun(process, node, health, lease_name(node), port_file)
    finally:
        stop(process)


def stop(process: subprocess.Popen[bytes], grace_s: float = 10) -> None:
    """SIGTERM, then SIGKILL after ``grace_s``; reaped either way."""
    process.terminate()
    try:
        process.wait(grace_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
