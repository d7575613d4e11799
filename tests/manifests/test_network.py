"""The network held to the code, both ways: every connection of the flow map
(tests/support/flows.py) that the code needs is allowed by the NetworkPolicies each
overlay renders, and every connection the map denies is denied — evaluated with
NetworkPolicy's own semantics (tests/support/netpol.py), since no CNI runs here.

Before issue 24 the production overlay let only scrape namespaces reach the controller's
port and advertised ``0.0.0.0`` as the placement URL: a real cluster silently ran in binder
mode. A copy of those manifests (tests/manifests/fixtures/) is kept so a test proves the
checks here fail on them.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml

from controller.__main__ import parse_settings as controller_settings
from daemon.node.__main__ import parse_settings as agent_settings
from daemon.sandbox.layout import DAEMON_PORT
from facade.__main__ import parse_settings as facade_settings
from facade.podspec import DaemonDelivery, SandboxClass, render_pod
from kube.placement import PLACEMENT_PATH
from sandman.wire.facade import CreateSandbox
from tests.support.flows import FLOWS, LOCAL, Flow
from tests.support.manifests import OVERLAYS, ROOT, Rendered, render
from tests.support.netpol import Endpoint, allowed

SYSTEM = "sandman-system"
FIXTURES = Path(__file__).parent / "fixtures"
#: The label an operator puts on the monitoring namespace (docs/operator-guide.md, Install).
SCRAPE = {"sandman.io/scrape": "true"}
#: Each installation an operator applies: Sandman's namespace and one tenant's, with the
#: overlays rendering them. Every overlay is in one (test below).
INSTALLATIONS = {
    "production": ("production", "tenant-example"),
    "simcluster": ("simcluster", "simcluster"),
}
#: The manifests' folders each installation renders policies from: simcluster's runs no
#: pods in sandman-system (the devstack runs the processes on loopback), so the denials
#: base/networkpolicy.yaml makes are not its to make.
POLICY_SOURCES = {"production": ("base/", "tenant/"), "simcluster": ("tenant/",)}
#: Addresses outside the pod network (documentation and private ranges as a cluster has).
ADDRESSES = {
    "trainer": "203.0.113.7",
    "apiserver": "10.96.0.1",
    "registry": "198.51.100.10",  # the registry-only example's address
    "internet": "93.184.216.34",
    "metadata": "169.254.169.254",
}

Obj = dict[str, Any]


def workload(rendered: Rendered, name: str) -> Obj:
    (found,) = [
        o
        for o in rendered.objects
        if o["kind"] in ("Deployment", "DaemonSet") and o["metadata"]["name"] == name
    ]
    return found


def main_container(obj: Obj) -> Obj:
    container: Obj = obj["spec"]["template"]["spec"]["containers"][0]
    return container


def parsed(obj: Obj, parser: Any) -> Any:
    """The workload's settings as its process parses its args (the downward API's values
    stand in as placeholders)."""
    c = main_container(obj)
    environ = {e["name"]: e.get("value", "from-the-downward-api") for e in c.get("env", ())}
    return parser(c.get("args", []), environ)


def listeners(system: Rendered, controller: Obj | None = None) -> dict[str, int]:
    """Each listener's port as the code would listen on it."""
    ctrl = parsed(controller or workload(system, "sandman-controller"), controller_settings)
    advertised = urlsplit(ctrl.advertise_url).port if ctrl.advertise_url else None
    facade = parsed(workload(system, "sandman-facade"), facade_settings)[0]
    return {
        "facade": facade.port,
        # --metrics-port: /metrics on a listener of its own; unset, beside the API.
        "facade-metrics": facade.metrics_port or facade.port,
        "controller": ctrl.health_port,
        "placement": advertised or ctrl.health_port,
        "node-agent": parsed(workload(system, "sandman-node-agent"), agent_settings).health_port,
        "daemon": DAEMON_PORT,
    }


def namespace_labels(rendered: Rendered, name: str) -> dict[str, str]:
    for ns in rendered.of_kind("Namespace"):
        if ns["metadata"]["name"] == name:
            return dict(ns["metadata"].get("labels") or {})
    return {}


def pod_of(system: Rendered, name: str, ip: str) -> Endpoint:
    obj = workload(system, name)
    template = obj["spec"]["template"]
    ports = {
        p["name"]: (p["containerPort"], p.get("protocol", "TCP"))
        for c in template["spec"]["containers"]
        for p in c.get("ports", ())
        if "name" in p
    }
    return Endpoint(
        name, ip, SYSTEM, template["metadata"]["labels"], namespace_labels(system, SYSTEM), ports
    )


def tenant_namespace(tenant: Rendered) -> str:
    namespace: str = tenant.one("NetworkPolicy", "sandman-sandboxes")["metadata"]["namespace"]
    return namespace


def sandbox(tenant: Rendered, class_name: str, ip: str) -> Endpoint:
    """A sandbox pod as facade/podspec.py renders it."""
    ns = tenant_namespace(tenant)
    pod = render_pod(
        CreateSandbox(image="task:1", owner="o"), SandboxClass(name=class_name),
        DaemonDelivery("init-container", bundle_image="b:1"), name=f"sb-{class_name}",
        namespace=ns, tenant="t", token="tok", now=datetime.now(UTC),
    )  # fmt: skip
    return Endpoint(f"sandbox-{class_name}", ip, ns, pod["metadata"]["labels"],
                    namespace_labels(tenant, ns))  # fmt: skip


def endpoints(system: Rendered, tenant: Rendered) -> dict[str, Endpoint]:
    production = render("production")  # the components' pods (simcluster runs none)
    ns = tenant_namespace(tenant)
    found = {
        "facade": pod_of(production, "sandman-facade", "10.0.1.10"),
        "controller": pod_of(production, "sandman-controller", "10.0.1.20"),
        "node-agent": pod_of(production, "sandman-node-agent", "10.0.1.30"),
        "sandbox-tiny": sandbox(tenant, "tiny", "10.0.2.10"),
        "sandbox-build": sandbox(tenant, "build", "10.0.2.11"),
        "sandbox-internet": sandbox(tenant, "internet", "10.0.2.12"),
        "tenant-pod": Endpoint("tenant-pod", "10.0.2.99", ns, {"app": "other"},
                               namespace_labels(tenant, ns)),
        "scraper": Endpoint("scraper", "10.0.3.5", "monitoring", {"app": "prometheus"}, SCRAPE),
        "kube-dns": Endpoint("kube-dns", "10.0.0.10", "kube-system", {"k8s-app": "kube-dns"}),
    }  # fmt: skip
    found |= {name: Endpoint(name, ip) for name, ip in ADDRESSES.items()}
    return found


def egress_component(flow: Flow) -> str:
    """The egress component an allowed sandbox flow relies on ("" for none)."""
    prefix = "tenant/egress/"
    return flow.code.removeprefix(prefix) if flow.code.startswith(prefix) else ""


def violations(
    policies: list[Obj], system: Rendered, tenant: Rendered, sources: tuple[str, ...]
) -> list[str]:
    """Every flow whose verdict under ``policies`` is not the map's (a denial only where
    the policies of its ``code`` are rendered: ``sources``)."""
    peers = endpoints(system, tenant)
    ports = listeners(render("production"))
    names = {p["metadata"]["name"] for p in policies}
    out = []
    for f in FLOWS:
        component = egress_component(f)
        if f.allowed and component and f"sandman-egress-{component}" not in names:
            continue  # this tenant's classes do not get that egress
        if not f.allowed and not f.code.startswith(sources):
            continue
        port = ports[f.port] if isinstance(f.port, str) else f.port
        verdict = allowed(policies, peers[f.src], peers[f.dst], port, f.protocol)
        if verdict != f.allowed:
            want = "allowed" if f.allowed else "denied"
            out.append(f"{f.src} -> {f.dst}:{port}/{f.protocol} must be {want} ({f.why})")
    return out


def policies_of(*rendered: Rendered) -> list[Obj]:
    seen: dict[tuple[str, str], Obj] = {}
    for r in rendered:
        for p in r.of_kind("NetworkPolicy"):
            seen[(p["metadata"]["namespace"], p["metadata"]["name"])] = p
    return list(seen.values())


@pytest.mark.parametrize("installation", INSTALLATIONS)
def test_every_flow_is_allowed_or_denied_as_the_map_says(installation: str) -> None:
    system, tenant = (render(o) for o in INSTALLATIONS[installation])
    found = violations(policies_of(system, tenant), system, tenant, POLICY_SOURCES[installation])
    assert not found


def test_every_overlay_is_checked() -> None:
    checked = {o for pair in INSTALLATIONS.values() for o in pair}
    assert checked == set(OVERLAYS)


def test_the_check_fails_on_the_policy_shipped_before_issue_24() -> None:
    system, tenant = render("production"), render("tenant-example")
    broken = list(yaml.safe_load_all((FIXTURES / "networkpolicy-before-24.yaml").read_text()))
    policies = policies_of(tenant) + broken
    found = violations(policies, system, tenant, POLICY_SOURCES["production"])
    assert found == [
        "facade -> controller:8080/TCP must be allowed (POST /internal/v1/placements on the "
        "leader's advertised URL (pre-placed creates))",
        # Today's facade serves /metrics on --metrics-port, which the old policy never opened.
        "scraper -> facade:9090/TCP must be allowed (/metrics (--metrics-port))",
    ]


# --- the placement edge: where the facade finds the controller, and what it can reach -----
def advertise_problems(controller: Obj) -> list[str]:
    """Why the leader would advertise a placement URL the facade cannot use."""
    c = main_container(controller)
    try:
        settings = parsed(controller, controller_settings)
    except SystemExit:  # ControllerSettings refused them (an unusable advertised address)
        return [f"the controller refuses to start with {c.get('args')}"]
    if not settings.advertise_url:
        return ["no --advertise-url: the leader advertises its health URL"]
    url = urlsplit(settings.advertise_url)
    env = {e["name"]: e for e in c.get("env", ())}
    host = url.hostname or ""
    problems = []
    if url.port != settings.health_port:
        problems.append(f"advertised port {url.port} is not the served {settings.health_port}")
    var = m.group(1) if (m := re.fullmatch(r"\$\((\w+)\)", url.netloc.rsplit(":", 1)[0])) else ""
    source = env.get(var, {}).get("valueFrom", {}).get("fieldRef", {}).get("fieldPath")
    if not var or source != "status.podIP":
        problems.append(f"advertised host {host!r} is not the pod's own IP (status.podIP)")
    if url.scheme != "http" or url.path not in ("", "/"):
        problems.append(f"{settings.advertise_url}: http://<ip>:<port>, no path")
    return problems


def test_the_controller_advertises_its_own_pod_ip_and_served_port() -> None:
    assert not advertise_problems(workload(render("production"), "sandman-controller"))


def test_the_advertise_check_fails_on_the_controller_shipped_before_issue_24() -> None:
    old = yaml.safe_load_all((FIXTURES / "controller-before-24.yaml").read_text())
    controller = next(o for o in old if o["kind"] == "Deployment")
    assert advertise_problems(controller) == [
        "the controller refuses to start with ['--health-host=0.0.0.0', '--health-port=8080']"
    ]


def test_the_facade_reads_the_lease_the_controller_writes_and_the_path_it_serves() -> None:
    production = render("production")
    ctrl = parsed(workload(production, "sandman-controller"), controller_settings)
    facade, _config = parsed(workload(production, "sandman-facade"), facade_settings)
    assert ctrl.election is not None, "the production controller elects a leader"
    assert (facade.placement.lease_namespace, facade.placement.lease_name) == (
        ctrl.election.namespace,
        ctrl.election.name,
    )
    assert not facade.placement.url, "production finds the leader on its Lease"
    (edge,) = [f for f in FLOWS if (f.src, f.dst, f.allowed) == ("facade", "controller", True)]
    assert PLACEMENT_PATH in edge.why and edge.code == "kube/placement.py"


def test_the_node_agent_reaches_the_cri_socket_it_is_given_by_a_host_path() -> None:
    (local,) = LOCAL
    agent = workload(render("production"), "sandman-node-agent")
    socket = parsed(agent, agent_settings).cri_socket
    spec = agent["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in spec["volumes"]}
    mounts = {m["mountPath"]: m["name"] for m in main_container(agent)["volumeMounts"]}
    assert socket in mounts, f"{local}: {socket} not mounted"
    assert volumes[mounts[socket]]["hostPath"] == {"path": socket, "type": "Socket"}
    assert not spec.get("hostNetwork"), "the agent's /metrics is governed by the policies"


def test_the_operator_guide_shows_the_flow_map() -> None:
    guide = (ROOT / "docs" / "operator-guide.md").read_text()
    table = guide.split("<!-- flows:begin -->", 1)[1].split("<!-- flows:end -->", 1)[0]
    rows = [line for line in table.splitlines() if line.startswith("| ") and "---" not in line]
    assert rows[1:] == [f.row() for f in FLOWS], "regenerate it: python -m tests.support.flows"
