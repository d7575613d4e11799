"""A refused API call is loud and not fatal: the node agent as a real process against an
embedded cluster that enforces RBAC, with its permissions from the manifests
(manifests/access/rbac-node-agent.yaml) less one verb — its Lease writes, its Events, its
plan reads.

A 403 is counted (``sandman_node_agent_api_requests_total{code="403"}``), logged once as an
error naming the missing permission, and fails ``/readyz`` with the reason ``forbidden``
(``/healthz``, the liveness probe, stays 200: a restart cannot fix RBAC) until a call of
that kind works again — each is tried again on its own, so restoring the rule is enough:
the next due Lease write, the informer's relist, the held Event's retry (a refused Event is
held, bounded, oldest dropped and counted, and recorded once allowed: not lost). A refusal
at start does not end the process either.
"""

from __future__ import annotations

import json
import re
import socket
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml

from kube.light import LightClient
from kube.preparation_contract import ANNOTATION_PREPARE, ANNOTATION_READY
from kube.resources import EVENTS, LEASES, Resource
from simcluster.cluster import ClusterSettings
from simcluster.embedded import EmbeddedCluster
from tests.support.agents import (
    AGENT_NS,
    AgentRun,
    agent_cluster,
    metric,
    run_agent,
    spawn_agent,
)
from tests.support.manifests import MANIFESTS
from tests.support.wait import wait_until, wait_until_async

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]

RBAC_GROUP = "rbac.authorization.k8s.io"
KINDS = {
    "Role": Resource(RBAC_GROUP, "v1", "roles", "Role"),
    "RoleBinding": Resource(RBAC_GROUP, "v1", "rolebindings", "RoleBinding"),
}
LEASE_ROLE = "sandman-node-agent"
EVENTS_ROLE = "sandman-node-agent-events"
FLAGS = ("--renew-interval-s", "0.3", "--lease-duration-s", "5")
REQUESTS = "sandman_node_agent_api_requests_total"


@pytest.fixture
def cluster_settings() -> ClusterSettings:
    settings = agent_cluster(base_s=0.1)
    return replace(settings, server=replace(settings.server, authorization="rbac"))


def _manifest_objects() -> list[dict[str, Any]]:
    text = (MANIFESTS / "access" / "rbac-node-agent.yaml").read_text()
    return [o for o in yaml.safe_load_all(text) if o]


def _rules(role: str, without: str = "") -> list[dict[str, Any]]:
    """The manifests' rules of ``role``, less the verb ``without``."""
    roles = [o for o in _manifest_objects() if o["kind"] == "Role"]
    (found,) = (r for r in roles if r["metadata"]["name"] == role)
    rules = [
        {**rule, "verbs": [v for v in rule["verbs"] if v != without]} for rule in found["rules"]
    ]
    return [rule for rule in rules if rule["verbs"]]


async def _grant_all_but(api: LightClient, role: str, verb: str) -> None:
    """The manifests' RBAC for the agent, with ``verb`` taken out of ``role``."""
    for obj in _manifest_objects():
        if obj["kind"] == "Role" and obj["metadata"]["name"] == role:
            obj = {**obj, "rules": _rules(role, without=verb)}
        await api.create(KINDS[obj["kind"]], obj, obj["metadata"]["namespace"])


async def _restore(api: LightClient, role: str, namespace: str) -> None:
    await api.patch(KINDS["Role"], role, {"rules": _rules(role)}, namespace)


async def _plan(api: LightClient, lease: str, images: list[str]) -> None:
    body = {"metadata": {"annotations": {ANNOTATION_PREPARE: json.dumps(sorted(images))}}}
    await api.patch(LEASES, lease, body, AGENT_NS)


def _refused(agent: AgentRun, verb: str, resource: str, permission: str, times: int) -> None:
    """Wait for ``times`` refusals counted and /healthz 200; then /readyz is 503
    ``forbidden`` naming the permission, the process alive, and one error line said it."""

    def counted() -> bool:
        text = agent.metrics()
        return metric(text, REQUESTS, verb=verb, resource=resource, code="403") >= times

    wait_until(counted, timeout_s=20, retry=(OSError,), what=f"{times} refused {verb} {resource}")
    # Liveness is the runtime's: 200 once the first reconcile answered (a plan read is
    # refused before it, on a slow machine), and a 403 never takes it down.
    wait_until(lambda: agent.healthz() == 200, timeout_s=20, what="the first reconcile")
    status, answer = agent.readyz()
    assert status == 503, answer
    assert answer["reason"] == "forbidden"
    group, _, namespace = permission.partition(" on ")[2].partition(" in namespace ")
    assert answer["refused"] == [
        {"verb": verb, "group": group.partition(".")[2], "resource": resource,
         "namespace": namespace},
    ]  # fmt: skip
    assert answer["nodes"] == [agent.node]
    assert permission in answer["message"]
    assert agent.process.poll() is None
    assert len(_lines(agent, verb, resource, permission)) == 1, agent.log.read_text()[-3000:]


def _lines(agent: AgentRun, verb: str, resource: str, permission: str) -> list[str]:
    line = re.compile(
        rf"ERROR .*{verb} {resource} forbidden \(403\): the node agent's RBAC lacks "
        + re.escape(permission)
    )
    return line.findall(agent.log.read_text(errors="replace"))


def _ready_again(agent: AgentRun, permission: str, timeout_s: float = 20) -> None:
    wait_until(lambda: agent.readyz()[0] == 200, timeout_s=timeout_s, what="/readyz 200 again")
    assert agent.readyz()[1]["reason"] == "ok"
    assert f"{permission} allowed again" in agent.log.read_text()


async def test_a_refused_lease_write_fails_readiness_until_it_is_allowed(
    cluster: EmbeddedCluster, api: LightClient, tmp_path: Path
) -> None:
    permission = "patch on leases.coordination.k8s.io in namespace sandman-nodes"
    await _grant_all_but(api, LEASE_ROLE, "patch")  # refused from the start
    with run_agent(cluster, "node-0", *FLAGS, workdir=tmp_path) as agent:
        _refused(agent, "patch", "leases", permission, times=2)
        await _restore(api, LEASE_ROLE, AGENT_NS)
        _ready_again(agent, permission)

        async def published() -> bool:
            lease = await api.get(LEASES, agent.lease, AGENT_NS)
            return ANNOTATION_READY in (lease["metadata"].get("annotations") or {})

        await wait_until_async(published, timeout_s=10, what="the ready set published")
        assert len(_lines(agent, "patch", "leases", permission)) == 1


async def _events_about(api: LightClient, node: str) -> list[str]:
    """The messages of the ImagePrepareFailed Events on ``node``."""
    listing = await api.list(EVENTS, "default")
    return [
        e.get("message", "")
        for e in listing["items"]
        if e.get("involvedObject", {}).get("name") == node
        and e.get("reason") == "ImagePrepareFailed"
    ]


async def test_a_refused_event_is_held_and_recorded_once_events_are_allowed(
    cluster: EmbeddedCluster, api: LightClient, tmp_path: Path
) -> None:
    """No further failure after the rule is restored: the held Event's own retry (on the
    renewal cadence, 0.3 s here, backoff to 1.2 s) records it and clears the refusal."""
    permission = "create on events in namespace default"
    await _grant_all_but(api, EVENTS_ROLE, "create")
    with run_agent(cluster, "node-0", *FLAGS, workdir=tmp_path) as agent:
        wait_until(lambda: agent.readyz()[0] == 200, timeout_s=20, retry=(OSError,))
        await _plan(api, agent.lease, ["registry.invalid/first:1"])  # fails: one Event
        _refused(agent, "create", "events", permission, times=2)  # refused again on retry
        assert metric(agent.metrics(), "sandman_node_agent_events_held") == 1
        assert await _events_about(api, "node-0") == []
        await _restore(api, EVENTS_ROLE, "default")
        _ready_again(agent, permission, timeout_s=5)
        (message,) = await _events_about(api, "node-0")
        assert "registry.invalid/first:1" in message
        text = agent.metrics()
        assert metric(text, "sandman_node_agent_events_held") == 0
        assert metric(text, "sandman_node_agent_events_total", reason="ImagePrepareFailed") == 1


async def test_refused_events_beyond_the_bound_drop_the_oldest_counted(
    cluster: EmbeddedCluster, api: LightClient, tmp_path: Path
) -> None:
    permission = "create on events in namespace default"
    await _grant_all_but(api, EVENTS_ROLE, "create")
    flags = (*FLAGS, "--max-held-events", "1")
    with run_agent(cluster, "node-0", *flags, workdir=tmp_path) as agent:
        wait_until(lambda: agent.readyz()[0] == 200, timeout_s=20, retry=(OSError,))
        await _plan(api, agent.lease, ["registry.invalid/first:1"])
        _refused(agent, "create", "events", permission, times=1)
        await _plan(api, agent.lease, ["registry.invalid/first:1", "registry.invalid/next:1"])
        dropped = "sandman_node_agent_events_dropped_total"
        wait_until(
            lambda: metric(agent.metrics(), dropped, reason="ImagePrepareFailed") == 1,
            timeout_s=10, what="the first Event dropped for the second",
        )  # fmt: skip
        assert "dropped the oldest" in agent.log.read_text()
        await _restore(api, EVENTS_ROLE, "default")
        _ready_again(agent, permission, timeout_s=5)
        (message,) = await _events_about(api, "node-0")
        assert "registry.invalid/next:1" in message


async def test_a_refused_plan_read_fails_readiness_until_the_watch_is_back(
    cluster: EmbeddedCluster, api: LightClient, tmp_path: Path
) -> None:
    permission = "list on leases.coordination.k8s.io in namespace sandman-nodes"
    await _grant_all_but(api, LEASE_ROLE, "list")
    with run_agent(cluster, "node-0", *FLAGS, workdir=tmp_path) as agent:
        _refused(agent, "list", "leases", permission, times=1)
        await _restore(api, LEASE_ROLE, AGENT_NS)
        _ready_again(agent, permission)
        await _plan(api, agent.lease, ["registry.local/task-1:1"])

        async def pulled() -> bool:
            lease = await api.get(LEASES, agent.lease, AGENT_NS)
            return "task-1" in (lease["metadata"].get("annotations") or {}).get(
                ANNOTATION_READY, ""
            )

        await wait_until_async(pulled, timeout_s=15, what="the plan read and pulled")


async def test_a_plan_read_refused_before_the_runtime_answers_reads_forbidden(
    cluster: EmbeddedCluster, api: LightClient, tmp_path: Path
) -> None:
    """The refusal wins over ``starting``: here the runtime's socket takes the connection
    and never answers, so the first reconcile waits out its 10 s deadline while the plan's
    list is refused (CI once read ``starting`` in that window, with a slow runtime)."""
    permission = "list on leases.coordination.k8s.io in namespace sandman-nodes"
    await _grant_all_but(api, LEASE_ROLE, "list")
    assert cluster.cluster is not None
    kubeconfig = Path(cluster.cluster.kubeconfigs["node-agent"])
    with socket.socket(socket.AF_UNIX) as silent:
        silent.bind(str(tmp_path / "silent.sock"))
        silent.listen(8)  # connects land in the backlog; nothing is ever accepted or said
        with spawn_agent(
            kubeconfig, str(tmp_path / "silent.sock"), "node-0", *FLAGS, workdir=tmp_path
        ) as agent:
            wait_until(
                lambda: metric(agent.metrics(), REQUESTS, verb="list", code="403") >= 1,
                timeout_s=20, retry=(OSError,), what="the refused list",
            )  # fmt: skip
            status, answer = agent.readyz()
            assert (status, answer["reason"]) == (503, "forbidden"), answer
            assert permission in answer["message"]
            assert answer["message"].endswith("; and: starting"), answer
            assert agent.healthz() == 503  # no reconcile yet: liveness waits for the runtime
