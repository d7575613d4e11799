"""devstack's agents (``python -m devstack.agents``: every node's agent core in one process)
pass on their cores' refusals: the process's ``/readyz`` is the single agent's answer
(daemon/node/app.py ``Readiness.of``) over all of its cores, 503 ``forbidden`` with the
refused permissions and the nodes whose cores hold them.

The cores share one client and one identity, so a refusal of one node only is a rule
narrowed by ``resourceNames``: here the agents may patch node-0's Lease and no other, so
node-1's core is refused and node-0's is not. A real process against an embedded cluster
that enforces RBAC.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import AsyncIterator, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from kube.light import LightClient
from kube.preparation_contract import lease_name
from kube.resources import Resource
from kube.settings import ClientSettings
from simcluster.embedded import EmbeddedCluster
from tests.support.agents import AGENT_NS, AGENT_SA_NS, agent_cluster, stop
from tests.support.wait import wait_until

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]

RBAC = "rbac.authorization.k8s.io"
ROLES = Resource(RBAC, "v1", "roles", "Role")
BINDINGS = Resource(RBAC, "v1", "rolebindings", "RoleBinding")
LEASES_GROUP = "coordination.k8s.io"
ROLE = "sandman-node-agent"


@pytest.fixture
def cluster() -> Iterator[EmbeddedCluster]:
    settings = agent_cluster(nodes=2, base_s=0.1)
    settings = replace(settings, server=replace(settings.server, authorization="rbac"))
    with EmbeddedCluster(settings) as c:
        yield c


def _role(*lease_rules: dict[str, Any]) -> dict[str, Any]:
    """The agents' Role in Sandman's namespace: list, watch and create leases, and
    ``lease_rules``."""
    return {
        "metadata": {"name": ROLE, "namespace": AGENT_NS},
        "rules": [{"apiGroups": [LEASES_GROUP], "resources": ["leases"],
                   "verbs": ["list", "watch", "create"]}, *lease_rules],
    }  # fmt: skip


async def _grant(cluster: EmbeddedCluster, lease_rules: list[dict[str, Any]]) -> None:
    """:func:`_role` with ``lease_rules``, bound to the agents' service account."""
    role = _role(*lease_rules)
    binding = {
        "metadata": {"name": ROLE, "namespace": AGENT_NS},
        "roleRef": {"apiGroup": RBAC, "kind": "Role", "name": ROLE},
        "subjects": [{"kind": "ServiceAccount", "name": "sandman-node-agent",
                      "namespace": AGENT_SA_NS}],
    }  # fmt: skip
    async with _api(cluster) as api:
        await api.create(ROLES, role, AGENT_NS)
        await api.create(BINDINGS, binding, AGENT_NS)


async def _grant_patch_on_every_lease(cluster: EmbeddedCluster) -> None:
    every = {"apiGroups": [LEASES_GROUP], "resources": ["leases"], "verbs": ["patch"]}
    async with _api(cluster) as api:
        await api.patch(ROLES, ROLE, {"rules": _role(every)["rules"]}, AGENT_NS)


@contextlib.asynccontextmanager
async def _api(cluster: EmbeddedCluster) -> AsyncIterator[LightClient]:
    settings = ClientSettings(qps=0)
    async with await LightClient.connect(settings, kubeconfig=str(cluster.kubeconfig)) as api:
        yield api


def _readyz(port: int) -> tuple[int, Any]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=5) as r:
            return int(r.status), json.loads(r.read())
    except urllib.error.HTTPError as e:
        return int(e.code), json.loads(e.read())


@contextlib.contextmanager
def _agents(cluster: EmbeddedCluster, workdir: Path) -> Iterator[int]:
    """``python -m devstack.agents`` for the cluster's nodes, once every core reconciled:
    its health port. Stopped (SIGTERM, then SIGKILL) on exit."""
    assert cluster.cluster is not None
    ready = workdir / "agents.ready"
    args = [
        sys.executable, "-m", "devstack.agents",
        "--kubeconfig", cluster.cluster.kubeconfigs["node-agent"],
        "--sockets", str(cluster.workdir / "cri-sockets.json"), "--namespace", AGENT_NS,
        "--state-dir", str(workdir / "state"), "--ready-file", str(ready),
        "--reconcile-interval-s=0.5", "--renew-interval-s=0.3", "--lease-duration-s=5",
        "--min-write-interval-s=0.3",
    ]  # fmt: skip
    log = workdir / "agents.log"
    with log.open("wb") as out:
        process = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT)
    try:

        def port() -> int | None:
            assert process.poll() is None, log.read_text()
            return int(json.loads(ready.read_text())["port"]) if ready.exists() else None

        yield wait_until(port, timeout_s=30, retry=(ValueError,), what="the agents' ready file")
    finally:
        stop(process)


async def test_one_cores_refusal_fails_the_processs_readiness_naming_its_node(
    cluster: EmbeddedCluster, tmp_path: Path
) -> None:
    only_node_0 = {"apiGroups": [LEASES_GROUP], "resources": ["leases"], "verbs": ["patch"],
                   "resourceNames": [lease_name("node-0")]}  # fmt: skip
    await _grant(cluster, [only_node_0])
    with _agents(cluster, tmp_path) as port:

        def refused() -> Any:
            status, answer = _readyz(port)
            return answer if status == 503 and answer["reason"] == "forbidden" else None

        answer = wait_until(refused, timeout_s=20, what="/readyz 503 forbidden")
        assert answer["nodes"] == ["node-1"], answer
        assert answer["refused"] == [
            {"verb": "patch", "group": LEASES_GROUP, "resource": "leases", "namespace": AGENT_NS}
        ]
        permission = f"patch on leases.{LEASES_GROUP} in namespace {AGENT_NS} (node-1)"
        assert answer["message"].startswith(f"forbidden (403): {permission}: "), answer

        await _grant_patch_on_every_lease(cluster)
        wait_until(lambda: _readyz(port)[0] == 200, timeout_s=10, what="/readyz 200 again")
        assert _readyz(port)[1]["nodes"] == []
