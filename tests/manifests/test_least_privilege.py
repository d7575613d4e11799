"""The manifests are enough, and a missing rule is loud: the devstack under the operator
manifests (``StackSettings.manifests``: simcluster enforcing RBAC, the ``simcluster``
overlay applied server-side, the controller, the facade and the node agents each with a
TokenRequest token of its own ServiceAccount) runs a small burst end to end — create, Ready,
exec, release, expiry GC — a preparation through the node agents and an announced pool (its
pods written as sandman-pools, impersonated), with no 403 anywhere.

Then the controller's ``pods/binding`` rule is removed, as an operator's mistake would: the
controller must say so — an error log line naming the 403, ``sandman_api_requests_total``
with code 403, and ``/readyz`` failing with the reason — rather than leave sandboxes
Pending in silence; once the rule is back, the pod binds and the controller is ready again.
A removed list/watch rule (the controller's on nodes) shows when its watch next reconnects:
an error log line, ``/readyz`` 503 naming the informer — not a cache silently gone stale.
Likewise the facade's ``create`` on pods: the trainer gets a 502 ``cluster_forbidden`` (not a
500, not a hang), the facade logs an error naming the 403 and counts the 502. And the node
agent's ``patch`` on leases (its renewals and ready sets): a ``python -m daemon.node``
process with the agents' token logs an error naming the missing permission, counts
``sandman_node_agent_api_requests_total`` with code 403, and its readiness endpoint — the
path the DaemonSet's readinessProbe names — answers 503 ``forbidden`` until a write works.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import pytest

from devstack.stack import StackSettings
from kube import PODS, KubeClient
from kube.preparation_contract import AGENT_LEASE_NAMESPACE
from kube.resources import Resource
from sandman import AsyncSandman
from tests.support.agents import metric, spawn_agent
from tests.support.kube import FAST, inject
from tests.support.kubectl import Kubectl
from tests.support.manifests import MANIFESTS, render
from tests.support.stack import RunningStack, running_stack
from tests.support.wait import wait_until_async

pytestmark = pytest.mark.timeout(120)
IMAGE = "registry.example/tasks/demo:1"
TENANT_NS = "sandman-dev"
CLUSTER_ROLES = Resource(
    "rbac.authorization.k8s.io", "v1", "clusterroles", "ClusterRole", namespaced=False
)
ROLES = Resource("rbac.authorization.k8s.io", "v1", "roles", "Role")
SYSTEM_NS = "sandman-system"
AGENT_ROLE = "sandman-node-agent"  # a Role in sandman-nodes (AGENT_LEASE_NAMESPACE)
BIND_ROLE = "sandman-controller-tenant"
READ_ROLE = "sandman-controller"
FACADE_ROLE = "sandman-facade-tenant"
FORBIDDEN_LINE = re.compile(r"ERROR .*binds forbidden \(403\)|binds forbidden \(403\).*ERROR")


@pytest.fixture(scope="module")
def stack(
    tmp_path_factory: pytest.TempPathFactory, pytestconfig: pytest.Config
) -> Iterator[RunningStack]:
    settings = StackSettings(
        workdir=Path(tmp_path_factory.mktemp("least-privilege")),
        nodes=2,
        node_agents=True,
        manifests=True,
        controller_args=("--gc-terminal-retention-s", "1"),
    )
    with running_stack(settings, pytestconfig) as running:
        yield running


@pytest.fixture
def owner() -> str:
    return f"run-{uuid.uuid4().hex[:10]}"


@pytest.fixture
async def admin(stack: RunningStack) -> AsyncIterator[KubeClient]:
    async with await KubeClient.connect(FAST, kubeconfig=str(stack.stack.kubeconfig)) as client:
        yield client


async def _without(
    admin: KubeClient, role_name: str, verb: str, resource: str, namespace: str | None = None
) -> None:
    """Remove ``verb`` on ``resource`` from a ClusterRole (from a Role in ``namespace``), as
    an operator's edit would."""
    kind = ROLES if namespace else CLUSTER_ROLES
    role = await admin.get(kind, role_name, namespace)
    rules = []
    for rule in role["rules"]:
        if resource in rule["resources"] and verb in rule["verbs"]:
            assert rule["resources"] == [resource], rule  # one rule, one resource: no collateral
            rule = {**rule, "verbs": [v for v in rule["verbs"] if v != verb]}
        if rule["verbs"]:
            rules.append(rule)
    assert rules != role["rules"], f"{role_name} grants no {verb} on {resource}"
    await admin.replace(kind, role_name, {**role, "rules": rules}, namespace)


def _reapply(stack: RunningStack) -> None:
    overlay = MANIFESTS / "overlays" / "simcluster"
    Kubectl(stack.stack.kubeconfig).run(
        "apply", "--server-side", "--force-conflicts", "-k", str(overlay)
    )


def _logs(stack: RunningStack) -> dict[str, str]:
    names = ("controller", "facade", "agents")
    return {n: stack.stack.log_path(n).read_text(errors="replace") for n in names}


async def _forbidden_requests(url: str) -> float:
    """The controller's ``sandman_api_requests_total`` samples with code 403, summed."""
    async with httpx.AsyncClient(timeout=5) as http:
        text = (await http.get(f"{url}/metrics")).text
    pattern = re.compile(r'^sandman_api_requests_total\{[^}]*code="403"[^}]*\} (\S+)$', re.M)
    return sum(float(v) for v in pattern.findall(text))


@pytest.mark.anyio
async def test_each_component_runs_with_its_own_account(stack: RunningStack) -> None:
    kubeconfigs = stack.stack.component_kubeconfigs
    assert set(kubeconfigs) == {"controller", "facade", "node-agent"}
    for component, path in kubeconfigs.items():
        whoami = Kubectl(path).json("auth", "whoami")
        assert whoami["status"]["userInfo"]["username"] == (
            f"system:serviceaccount:sandman-system:sandman-{component}"
        )
    # RBAC is on: the facade may create pods but not bind them (the controller's job).
    facade = Kubectl(kubeconfigs["facade"])
    can = ("auth", "can-i", "create", "pods", "-n", TENANT_NS)
    assert facade.run(*can, check=False).stdout.strip() == "yes"
    assert facade.run(*can, "--subresource", "binding", check=False).stdout.strip() == "no"


@pytest.mark.anyio
async def test_the_node_agent_cannot_write_the_election_lease(stack: RunningStack) -> None:
    """One compromised node must not steer placements: the election Lease's
    ``placement-url`` is what the facade trusts, so the agents' Leases live apart and the
    agent's account can write Leases only there."""
    agent = Kubectl(stack.stack.component_kubeconfigs["node-agent"])

    def can(*args: str) -> str:
        return agent.run("auth", "can-i", *args, check=False).stdout.strip()

    election = "leases.coordination.k8s.io/sandman-controller"
    for verb in ("patch", "update", "delete"):
        assert can(verb, election, "-n", SYSTEM_NS) == "no", verb
    assert can("create", "leases.coordination.k8s.io", "-n", SYSTEM_NS) == "no"
    # Where its own Lease lives it may (docs/node-agent.md "Where the Leases live").
    lease = "leases.coordination.k8s.io"
    assert can("create", lease, "-n", AGENT_LEASE_NAMESPACE) == "yes"
    assert can("patch", lease, "-n", AGENT_LEASE_NAMESPACE) == "yes"


@pytest.mark.anyio
async def test_a_burst_and_a_preparation_need_nothing_the_manifests_do_not_grant(
    stack: RunningStack, admin: KubeClient, owner: str
) -> None:
    async with AsyncSandman(stack.url, stack.token, owner=owner) as client:
        prep = await client.prepare({f"registry.example/prep/{owner}:1": 2})
        # Announced sandboxes: the controller's pool filler writes them as sandman-pools
        # (impersonated: the manifests' Role allows that one account only).
        pooled = await client.prepare([(IMAGE, 2)], sandboxes=True)

        async def pool_created() -> bool:
            view = await pooled.refresh()
            return view.pool is not None and view.pool.created == 2

        assert await wait_until_async(pool_created, timeout_s=30, interval_s=0.2)
        sandboxes = await client.create_many(6, IMAGE, timeout_s=60)
        for sandbox in sandboxes:
            assert (await sandbox.exec("echo $((6 * 7))")).stdout == "42\n"
        for sandbox in sandboxes[:3]:
            await sandbox.release()
        await prep.wait_ready(1.0, timeout_s=60, poll_s=0.5)
        # The collector's part: an expired sandbox is deleted by the controller. Not waited
        # for: on a busy machine its 1 s can end before it is Ready (then it is "releasing").
        expiring = await client.create(IMAGE, ttl_s=1, wait=False)

        async def expired_and_collected() -> bool:
            pods = await admin.list(PODS, TENANT_NS, label_selector=f"sandman.io/owner={owner}")
            return expiring.id not in {p["metadata"]["name"] for p in pods["items"]}

        assert await wait_until_async(expired_and_collected, timeout_s=30, interval_s=0.2)
        released = await client.release_owner()
        assert released >= 3
    assert await _forbidden_requests(stack.stack.controller_url) == 0
    for component, log in _logs(stack).items():
        assert "forbidden" not in log.lower(), f"{component}: {log[-3000:]}"


@pytest.mark.anyio
async def test_a_removed_bind_rule_is_reported_not_a_silent_stall(
    stack: RunningStack, admin: KubeClient, owner: str
) -> None:
    await _without(admin, BIND_ROLE, "create", "pods/binding")
    readyz = f"{stack.stack.controller_url}/readyz"
    try:
        async with (
            AsyncSandman(stack.url, stack.token, owner=owner) as client,
            httpx.AsyncClient(timeout=5) as http,
        ):
            # A group is always placed by the binder (pre-placed creation skips groups), so
            # this sandbox needs the bind whichever creation mode is the default.
            (pending,) = await client.create_many(1, IMAGE, wait=False, group="needs-a-bind")

            async def unready() -> bool:
                answer = await http.get(readyz)
                return answer.status_code == 503 and "binds forbidden (403)" in answer.text

            assert await wait_until_async(unready, timeout_s=20, interval_s=0.2)
            assert "pods/binding" in (await http.get(readyz)).text
            assert await _forbidden_requests(stack.stack.controller_url) > 0
            assert FORBIDDEN_LINE.search(_logs(stack)["controller"])
            # Back as the manifests have it: the retry binds, readiness returns.
            _reapply(stack)

            async def ready_again() -> bool:
                return (await http.get(readyz)).status_code == 200

            assert await wait_until_async(ready_again, timeout_s=45, interval_s=0.2)
            await pending.wait_ready(timeout_s=30)
    finally:
        _reapply(stack)


@pytest.mark.anyio
async def test_a_removed_create_rule_is_a_502_with_a_reason_and_an_error_log(
    stack: RunningStack, admin: KubeClient, owner: str
) -> None:
    await _without(admin, FACADE_ROLE, "create", "pods")
    headers = {"Authorization": f"Bearer {stack.token}"}
    try:
        # Raw HTTP: the SDK would retry a 5xx.
        async with httpx.AsyncClient(timeout=10, headers=headers) as http:
            answer = await http.post(
                f"{stack.url}/v1/sandboxes", json={"image": IMAGE, "owner": owner}
            )
            assert answer.status_code == 502, answer.text
            error = answer.json()["error"]
            assert error["reason"] == "cluster_forbidden"
            assert "pods" in error["message"] and "forbidden" in error["message"]
            metrics = (await http.get(f"{stack.url}/metrics")).text
        assert re.search(
            r'^sandman_facade_requests_total\{[^}]*code="502"[^}]*\} [1-9]', metrics, re.M
        )
        log = _logs(stack)["facade"]
        assert re.search(r"ERROR .*sandbox create forbidden \(403\)", log), log[-2000:]
    finally:
        _reapply(stack)


@pytest.mark.anyio
async def test_a_removed_watch_rule_fails_readiness_instead_of_a_stale_cache(
    stack: RunningStack, admin: KubeClient
) -> None:
    await _without(admin, READ_ROLE, "watch", "nodes")
    readyz = f"{stack.stack.controller_url}/readyz"
    try:
        await inject(admin, kind="drop-watches")  # every watch reconnects, now refused
        async with httpx.AsyncClient(timeout=5) as http:

            async def unready() -> bool:
                answer = await http.get(readyz)
                return answer.status_code == 503 and "forbidden (403): nodes" in answer.text

            assert await wait_until_async(unready, timeout_s=20, interval_s=0.2)
            log = _logs(stack)["controller"]
            assert re.search(r"ERROR .*nodes: list/watch forbidden \(403\)", log), log[-2000:]
            _reapply(stack)

            async def ready_again() -> bool:
                return (await http.get(readyz)).status_code == 200

            assert await wait_until_async(ready_again, timeout_s=30, interval_s=0.2)
    finally:
        _reapply(stack)


def _agent_readiness_path() -> str:
    """The path the DaemonSet's readinessProbe asks (the production overlay's)."""
    daemonset = render("production").one("DaemonSet", "sandman-node-agent", SYSTEM_NS)
    (container,) = daemonset["spec"]["template"]["spec"]["containers"]
    path: str = container["readinessProbe"]["httpGet"]["path"]
    return path


@pytest.mark.anyio
async def test_a_removed_lease_rule_makes_the_node_agent_unready_not_stale(
    stack: RunningStack, admin: KubeClient, tmp_path: Path
) -> None:
    probe = _agent_readiness_path()
    sockets = json.loads(
        (stack.stack.settings.workdir / "cluster" / "cri-sockets.json").read_text()
    )
    node = sorted(sockets)[0]
    kubeconfig = stack.stack.component_kubeconfigs["node-agent"]
    # Renewals every 0.3 s: each is a patch of its Lease, so the 403 comes without a plan.
    flags = ("--renew-interval-s", "0.3", "--lease-duration-s", "5")
    permission = "patch on leases.coordination.k8s.io in namespace sandman-nodes"
    with spawn_agent(kubeconfig, sockets[node], node, *flags, workdir=tmp_path) as agent:

        def ready() -> bool:
            return agent.readyz(probe)[0] == 200

        assert await wait_until_async(ready, timeout_s=20, interval_s=0.2, retry=(OSError,))
        await _without(admin, AGENT_ROLE, "patch", "leases", AGENT_LEASE_NAMESPACE)
        try:

            def refused() -> float:
                return metric(
                    agent.metrics(), "sandman_node_agent_api_requests_total",
                    verb="patch", resource="leases", code="403",
                )  # fmt: skip

            assert await wait_until_async(
                lambda: refused() >= 2, timeout_s=20, interval_s=0.2, retry=(OSError,)
            )
            status, answer = agent.readyz(probe)
            assert status == 503 and answer["reason"] == "forbidden", answer
            assert permission in answer["message"]
            log = agent.log.read_text(errors="replace")
            lines = re.findall(r"ERROR .*patch leases forbidden \(403\): .*lacks (.*?):", log)
            assert lines == [permission], log[-3000:]  # once, however many renewals failed
            _reapply(stack)
            assert await wait_until_async(ready, timeout_s=20, interval_s=0.2, retry=(OSError,))
        finally:
            _reapply(stack)
