"""Every overlay of manifests/ renders with ``kubectl kustomize``, and every object it renders
is valid for the Kubernetes version the manifests state (the ``kubernetes-validate``
schemas, strict: an unknown field is an error, as the API server's strict field
validation makes it); Sandman's own CRD objects validate against the CRD's schema.

Beyond schemas, the properties an operator relies on and a schema cannot see: the facade
configuration the overlay ships loads (the facade would start), the daemon delivery and the
node agent agree, each image is set once, every workload is locked down and probed, and
every namespaced object names its namespace.
"""

from __future__ import annotations

import functools
import json
import re
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

from controller.__main__ import parse_settings as controller_settings
from daemon.node.__main__ import parse_settings as agent_settings
from devstack.crds import image_preparation_crd
from facade.__main__ import parse_settings as facade_settings
from facade.config import load_config
from tests.support.manifests import (
    KUBERNETES_VERSION,
    MANIFESTS,
    OVERLAYS,
    ROOT,
    Rendered,
    containers,
    render,
    render_with_components,
    workloads,
)

#: Overlays plus delivery components, each rendered as an operator would combine them.
DELIVERIES = {
    "init-container": (),
    "host-path": ("delivery-host-path",),
    "image-volume": ("delivery-image-volume",),
}
#: Kinds whose schema no Kubernetes release carries: the Prometheus Operator's (checked for
#: shape below) and Sandman's CRD (checked against its own schema).
CRD_KINDS = {"PrometheusRule", "ImagePreparation"}
#: Where each image comes from: the base's `images:` list, the one place they are set.
BASE_IMAGES = {
    i["name"]: f"{i['newName']}:{i['newTag']}"
    for i in yaml.safe_load((MANIFESTS / "base" / "kustomization.yaml").read_text())["images"]
}


#: (overlay, components) an operator may apply: every overlay, and production with each
#: delivery component.
CASES = [(o, ()) for o in OVERLAYS] + [("production", c) for c in DELIVERIES.values() if c]


@pytest.fixture(params=CASES, ids=lambda case: "+".join((case[0], *case[1])))
def rendered(request: pytest.FixtureRequest) -> Rendered:
    overlay, components = request.param
    return render_with_components(overlay, components) if components else render(overlay)


@functools.cache
def _schema_error(text: str) -> str:
    """The schema error of one object (JSON text), "" if valid: objects the overlays share
    are validated once."""
    obj = json.loads(text)
    try:
        kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)
    except kubernetes_validate.ValidationError as e:
        where = "/".join(str(p) for p in e.path)
        return f"{obj['kind']} {obj['metadata']['name']}: {where}: {e.message}"
    return ""


def test_every_object_is_valid_for_the_stated_kubernetes_version(rendered: Rendered) -> None:
    assert rendered.objects
    errors = [
        _schema_error(json.dumps(obj, sort_keys=True))
        for obj in rendered.objects
        if obj["kind"] not in CRD_KINDS
    ]
    assert not [e for e in errors if e]


def test_image_preparations_match_the_crd_schema(rendered: Rendered) -> None:
    schema = image_preparation_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    for obj in rendered.of_kind("ImagePreparation"):
        assert obj["apiVersion"] == "sandman.io/v1alpha1"
        jsonschema.validate(obj, schema)


def test_prometheus_rules_have_the_operators_shape(rendered: Rendered) -> None:
    guide = (ROOT / "docs" / "operator-guide.md").read_text()
    anchors = {
        re.sub(r"[^a-z0-9 -]", "", line.lstrip("#").strip().lower()).replace(" ", "-")
        for line in guide.splitlines()
        if line.startswith("#")
    }
    for obj in rendered.of_kind("PrometheusRule"):
        assert obj["apiVersion"] == "monitoring.coreos.com/v1"
        for group in obj["spec"]["groups"]:
            assert set(group) <= {"name", "interval", "rules"}
            for rule in group["rules"]:
                assert set(rule) <= {"alert", "expr", "for", "labels", "annotations"}
                assert rule["alert"] and rule["expr"] and rule["labels"]["severity"]
                page, _, anchor = rule["annotations"]["runbook"].partition("#")
                assert page == "docs/operator-guide.md" and anchor in anchors, rule["alert"]


def test_every_namespaced_object_names_its_namespace(rendered: Rendered) -> None:
    """Nothing depends on `kubectl -n`: applied anywhere, each object lands where it must."""
    cluster_scoped = {
        "Namespace", "ClusterRole", "ClusterRoleBinding", "PriorityClass", "FlowSchema",
        "PriorityLevelConfiguration", "CustomResourceDefinition", "RuntimeClass",
    }  # fmt: skip
    for obj in rendered.objects:
        if obj["kind"] not in cluster_scoped:
            assert obj["metadata"].get("namespace"), f"{obj['kind']} {obj['metadata']['name']}"


def test_every_image_is_set_in_the_base_kustomization(rendered: Rendered) -> None:
    refs = {c["image"] for w in workloads(rendered.objects) for _s, c in containers(w)}
    refs |= {i["image"] for o in rendered.of_kind("ImagePreparation") for i in o["spec"]["images"]}
    assert refs <= set(BASE_IMAGES.values()), refs - set(BASE_IMAGES.values())


def test_workloads_are_locked_down_probed_and_sized(rendered: Rendered) -> None:
    for w in workloads(rendered.objects):
        for spec, c in containers(w):
            where = f"{w['metadata']['name']}/{c['name']}"
            pod_sc, sc = spec.get("securityContext", {}), c.get("securityContext", {})
            assert sc.get("allowPrivilegeEscalation") is False, where
            assert sc.get("readOnlyRootFilesystem") is True, where
            assert sc.get("capabilities", {}).get("drop") == ["ALL"], where
            assert not sc.get("capabilities", {}).get("add"), where
            assert not sc.get("privileged"), where
            seccomp = sc.get("seccompProfile") or pod_sc.get("seccompProfile")
            assert seccomp == {"type": "RuntimeDefault"}, where
            assert c["resources"]["requests"]["cpu"] and c["resources"]["limits"]["memory"], where
            assert c["livenessProbe"] and c["readinessProbe"], where
            for flag in ("hostNetwork", "hostPID", "hostIPC"):
                assert not spec.get(flag), where
        if w["kind"] == "Deployment":  # only the node agent needs uid 0 (the CRI socket)
            assert w["spec"]["template"]["spec"]["securityContext"]["runAsNonRoot"] is True


def facade_config(rendered: Rendered, tmp_path: Path) -> Any:
    """The overlay's facade ConfigMap written out as the pod sees it, and loaded."""
    data = rendered.config_map("sandman-facade-config")["data"]
    for name, text in data.items():
        (tmp_path / name).write_text(text)
    secret = tmp_path / "secret"
    secret.write_text("x" * 48)
    document = yaml.safe_load(data["facade.yaml"])
    document["secret_file"] = str(secret)  # the Secret the operator creates at install
    (tmp_path / "facade.yaml").write_text(yaml.safe_dump(document))
    return load_config(tmp_path / "facade.yaml")


#: Each server process's command, and its command line parsed as the process parses it.
PARSERS = {
    "sandman-controller": controller_settings,
    "sandman-facade": facade_settings,
    "sandman-node-agent": agent_settings,
}


def test_every_workload_s_args_are_flags_its_process_takes(rendered: Rendered) -> None:
    """The flags are generated from the settings (sandman.base.settings): a renamed setting
    renames its flag, and a manifest still passing the old name would fail at start."""
    seen = set()
    for _spec, c in (sc for w in workloads(rendered.objects) for sc in containers(w)):
        (command,) = c.get("command", ("-",))[:1]
        if command in PARSERS:
            environ = {e["name"]: e.get("value", "from-the-downward-api") for e in c.get("env", ())}
            PARSERS[command](c.get("args", []), environ)  # SystemExit(2) on an unknown flag
            seen.add(command)
    if rendered.name.startswith("production"):  # the others hold no server workload
        assert seen == set(PARSERS), f"{rendered.name}: no container runs {set(PARSERS) - seen}"


@pytest.mark.parametrize("delivery", DELIVERIES)
def test_the_facade_configuration_loads_and_matches_the_delivery(
    delivery: str, tmp_path: Path
) -> None:
    rendered = render_with_components("production", DELIVERIES[delivery])
    config = facade_config(rendered, tmp_path)
    assert config.delivery.mode == delivery
    secret_path = yaml.safe_load(
        rendered.config_map("sandman-facade-config")["data"]["facade.yaml"]
    )
    mounts = {
        m["name"]: m["mountPath"]
        for _s, c in containers(rendered.one("Deployment", "sandman-facade"))
        for m in c.get("volumeMounts", ())
    }
    assert Path(secret_path["secret_file"]).parent == Path(mounts["secret"])
    # The Deployment mounts the generated ConfigMap (its name carries the content hash).
    volumes = rendered.one("Deployment", "sandman-facade")["spec"]["template"]["spec"]["volumes"]
    (config_volume,) = [v for v in volumes if v["name"] == "config"]
    generated = rendered.config_map("sandman-facade-config")["metadata"]["name"]
    assert config_volume["configMap"]["name"] == generated
    agent = rendered.one("DaemonSet", "sandman-node-agent")
    args = agent["spec"]["template"]["spec"]["containers"][0]["args"]
    flags = dict(a.removeprefix("--").split("=", 1) for a in args)
    prepared = {
        i["image"] for o in rendered.of_kind("ImagePreparation") for i in o["spec"]["images"]
    }
    if delivery == "host-path":
        assert config.delivery.host_path == f"{flags['bundle-root']}/current"
        assert BASE_IMAGES["sandman-daemon-bundle"] not in prepared  # never pulled per sandbox
    else:
        assert "bundle-source" not in flags
        # The one place: the bundle image in the delivery file is the base's, kept warm.
        assert config.delivery.bundle_image == BASE_IMAGES["sandman-daemon-bundle"]
        assert config.delivery.bundle_image in prepared


def test_every_class_priority_class_exists_and_tenants_have_a_namespace(tmp_path: Path) -> None:
    production = render("production")
    config = facade_config(production, tmp_path)
    priority = {o["metadata"]["name"] for o in production.of_kind("PriorityClass")}
    assert {c.priority_class for c in config.classes.values()} <= priority
    tenants = render("tenant-example")
    namespaces = {o["metadata"]["name"] for o in tenants.of_kind("Namespace")}
    assert {t.namespace for t in config.tenants.tenants()} <= namespaces


def test_the_binds_have_a_priority_level_of_their_own() -> None:
    """A create flood cannot take the binds' seats: their level lends nothing and no other
    FlowSchema feeds it; the binds' schema wins over the general one (lower precedence)."""
    access = render("simcluster")
    schemas = access.of_kind("FlowSchema")
    binds = access.one("FlowSchema", "sandman-binds")
    level = binds["spec"]["priorityLevelConfiguration"]["name"]
    feeding = [s for s in schemas if s["spec"]["priorityLevelConfiguration"]["name"] == level]
    assert [s["metadata"]["name"] for s in feeding] == ["sandman-binds"]
    plc = access.one("PriorityLevelConfiguration", level)
    assert plc["spec"]["limited"]["lendablePercent"] == 0
    (rule,) = binds["spec"]["rules"]
    assert rule["resourceRules"] == [
        {"verbs": ["create"], "apiGroups": [""], "resources": ["pods/binding"], "namespaces": ["*"]}
    ]
    general = access.one("FlowSchema", "sandman-workload")
    assert binds["spec"]["matchingPrecedence"] < general["spec"]["matchingPrecedence"]
    # The election Lease likewise: a level of its own, matched before the general schema.
    election = access.one("FlowSchema", "sandman-election")
    assert election["spec"]["matchingPrecedence"] < general["spec"]["matchingPrecedence"]
    lease_level = access.one("PriorityLevelConfiguration", "sandman-election")
    assert lease_level["spec"]["limited"]["lendablePercent"] == 0


def sandbox_policies(rendered: Rendered) -> dict[str, list[dict[str, Any]]]:
    by_ns: dict[str, list[dict[str, Any]]] = {}
    for p in rendered.of_kind("NetworkPolicy"):
        keys = {e["key"] for e in p["spec"]["podSelector"].get("matchExpressions", ())}
        if "sandman.io/sandbox" in keys:
            by_ns.setdefault(p["metadata"]["namespace"], []).append(p)
    return by_ns


@pytest.mark.parametrize("overlay", ["simcluster", "tenant-example"])
def test_sandboxes_are_reached_by_the_facade_only_and_reach_nothing_by_default(
    overlay: str,
) -> None:
    rendered = render(overlay)
    tenant_namespaces = {
        o["metadata"]["name"]
        for o in rendered.of_kind("Namespace")
        if o["metadata"]["labels"].get("sandman.io/tenant-namespace") == "true"
    }
    policies = sandbox_policies(rendered)
    assert tenant_namespaces and set(policies) == tenant_namespaces
    for ns, found in policies.items():
        default = [p for p in found if p["metadata"]["name"] == "sandman-sandboxes"]
        assert len(default) == 1, ns
        spec = default[0]["spec"]
        assert spec["policyTypes"] == ["Ingress", "Egress"] and spec["egress"] == []
        (ingress,) = spec["ingress"]
        (peer,) = ingress["from"]
        assert peer == {
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "sandman-system"}},
            "podSelector": {"matchLabels": {"app.kubernetes.io/name": "sandman-facade"}},
        }
        assert ingress["ports"] == [{"port": 8790, "protocol": "TCP"}]
        # Any further policy only adds egress, and only for named classes.
        for extra in (p for p in found if p is not default[0]):
            assert extra["spec"]["policyTypes"] == ["Egress"], extra["metadata"]["name"]
            classes = [
                e
                for e in extra["spec"]["podSelector"]["matchExpressions"]
                if e["key"] == "sandman.io/class"
            ]
            assert classes and classes[0]["operator"] == "In", extra["metadata"]["name"]
            for rule in extra["spec"]["egress"]:
                for peer in rule["to"]:
                    block = peer.get("ipBlock")
                    if block and block["cidr"] == "0.0.0.0/0":
                        assert {"10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16"} <= set(
                            block["except"]
                        )


def test_every_rbac_rule_is_commented() -> None:
    """Each rule of every Role and ClusterRole says why it exists, in the line above it."""
    for path in sorted((MANIFESTS / "access").glob("rbac-*.yaml")):
        lines = path.read_text().splitlines()
        for i, line in enumerate(lines):
            if line.strip().startswith("- apiGroups:"):
                above = lines[i - 1].strip()
                assert above.startswith("#"), f"{path.name}:{i + 1}: a rule without its why"
