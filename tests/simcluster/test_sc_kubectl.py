"""Conformance through the real kubectl binary (client-go): discovery, client-side apply
(strategic merge patch), table printing, selectors, label/annotate, delete, bindings, quota
and the error Status objects kubectl prints."""

from __future__ import annotations

from conftest import Kubectl

MANIFEST = """
apiVersion: v1
kind: Namespace
metadata: {name: demo}
---
apiVersion: v1
kind: Pod
metadata: {name: p1, namespace: demo, labels: {app: web}}
spec:
  containers:
  - name: c
    image: nginx:1.25
    env: [{name: A, value: "1"}]
---
apiVersion: v1
kind: ConfigMap
metadata: {name: cm1, namespace: demo}
data: {a: "1"}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: d1, namespace: demo}
spec:
  replicas: 1
  selector: {matchLabels: {app: d}}
  template:
    metadata: {labels: {app: d}}
    spec:
      containers: [{name: c, image: "nginx:1.25"}]
"""


def test_discovery_and_version(kubectl: Kubectl) -> None:
    out = kubectl.run("api-resources").stdout
    assert any(line.split()[:2] == ["pods", "po"] for line in out.splitlines())
    assert "leases" in out
    assert "deployments" in out
    version = kubectl.json("version")
    assert version["serverVersion"]["minor"] == "32"


def test_apply_create_unchanged_configured(kubectl: Kubectl) -> None:
    out = kubectl.run("apply", "-f", "-", stdin=MANIFEST).stdout
    assert "pod/p1 created" in out
    assert "deployment.apps/d1 created" in out
    out = kubectl.run("apply", "-f", "-", stdin=MANIFEST).stdout
    assert "pod/p1 unchanged" in out
    assert "configmap/cm1 unchanged" in out
    changed = MANIFEST.replace('data: {a: "1"}', 'data: {a: "2", b: "3"}').replace(
        "replicas: 1", "replicas: 3"
    )
    out = kubectl.run("apply", "-f", "-", stdin=changed).stdout
    assert "configmap/cm1 configured" in out
    assert "deployment.apps/d1 configured" in out
    assert kubectl.json("-n", "demo", "get", "cm", "cm1")["data"] == {"a": "2", "b": "3"}
    deploy = kubectl.json("-n", "demo", "get", "deploy", "d1")
    assert deploy["spec"]["replicas"] == 3
    assert deploy["metadata"]["generation"] == 2
    # a pod's env may not change: the server answers 422 Invalid, kubectl prints it
    env2 = 'env: [{name: A, value: "1"}, {name: B, value: "2"}]'
    pod_changed = changed.replace('env: [{name: A, value: "1"}]', env2)
    failed = kubectl.run("apply", "-f", "-", stdin=pod_changed, check=False)
    assert failed.returncode != 0
    assert "pod updates may not change fields" in failed.stderr


def test_get_table_selectors_label_annotate(kubectl: Kubectl) -> None:
    kubectl.run("apply", "-f", "-", stdin=MANIFEST)
    out = kubectl.run("-n", "demo", "get", "pods", "-o", "wide").stdout
    header, row = out.splitlines()[:2]
    assert header.split()[:5] == ["NAME", "READY", "STATUS", "RESTARTS", "AGE"]
    assert row.split()[:3] == ["p1", "0/1", "Pending"]
    assert "p1" in kubectl.run("-n", "demo", "get", "pods", "-l", "app in (web,db)").stdout
    assert "No resources" in kubectl.run("-n", "demo", "get", "pods", "-l", "app!=web").stderr
    got = kubectl.json("get", "pods", "-A", "--field-selector", "status.phase=Pending")
    assert [p["metadata"]["name"] for p in got["items"]] == ["p1"]
    kubectl.run("-n", "demo", "label", "pod", "p1", "tier=front")
    kubectl.run("-n", "demo", "annotate", "pod", "p1", "note=hi")
    pod = kubectl.json("-n", "demo", "get", "pod", "p1")
    assert pod["metadata"]["labels"] == {"app": "web", "tier": "front"}
    assert pod["metadata"]["annotations"]["note"] == "hi"
    assert "p1" in kubectl.run("-n", "demo", "get", "all").stdout


def test_errors_are_status_objects(kubectl: Kubectl) -> None:
    kubectl.run("apply", "-f", "-", stdin=MANIFEST)
    missing = kubectl.run("-n", "demo", "get", "pod", "nope", check=False)
    assert 'Error from server (NotFound): pods "nope" not found' in missing.stderr
    dup = kubectl.run("create", "-f", "-", stdin=MANIFEST, check=False)
    assert (
        'Error from server (AlreadyExists): error when creating "STDIN": pods "p1" already exists'
        in dup.stderr
    )
    bad = kubectl.run("-n", "demo", "get", "pods", "--field-selector", "spec.bogus=1", check=False)
    assert "field label not supported: spec.bogus" in bad.stderr


def test_binding_and_delete(kubectl: Kubectl) -> None:
    kubectl.run("apply", "-f", "-", stdin=MANIFEST)
    binding = (
        "apiVersion: v1\nkind: Binding\nmetadata: {name: p1, namespace: demo}\n"
        "target: {kind: Node, name: n1}\n"
    )
    kubectl.run("create", "-f", "-", stdin=binding)
    pod = kubectl.json("-n", "demo", "get", "pod", "p1")
    assert pod["spec"]["nodeName"] == "n1"
    assert {"type": "PodScheduled", "status": "True"}.items() <= pod["status"]["conditions"][
        0
    ].items()
    again = kubectl.run("create", "-f", "-", stdin=binding, check=False)
    assert 'pods/binding "p1": pod p1 is already assigned to node "n1"' in again.stderr
    # bound pod without a kubelet: graceful deletion leaves it Terminating; --force removes it
    kubectl.run("-n", "demo", "delete", "pod", "p1", "--wait=false")
    assert kubectl.json("-n", "demo", "get", "pod", "p1")["metadata"]["deletionTimestamp"]
    kubectl.run("-n", "demo", "delete", "pod", "p1", "--grace-period=0", "--force")
    assert kubectl.run("-n", "demo", "get", "pod", "p1", check=False).returncode != 0
    kubectl.run("delete", "ns", "demo")  # waits until the namespace is gone
    assert "demo" not in kubectl.run("get", "ns").stdout


def test_quota_forbidden(kubectl: Kubectl) -> None:
    imperative = kubectl.run("create", "ns", "q", check=False)  # typed client: protobuf body
    assert "Error from server (UnsupportedMediaType)" in imperative.stderr
    kubectl.run("apply", "-f", "-", stdin="apiVersion: v1\nkind: Namespace\nmetadata: {name: q}\n")
    quota = (
        "apiVersion: v1\nkind: ResourceQuota\nmetadata: {name: small, namespace: q}\n"
        "spec: {hard: {pods: '1'}}\n"
    )
    kubectl.run("apply", "-f", "-", stdin=quota)
    kubectl.run("-n", "q", "run", "a", "--image=busybox:1.36")
    second = kubectl.run("-n", "q", "run", "b", "--image=busybox:1.36", check=False)
    assert (
        'Error from server (Forbidden): pods "b" is forbidden: exceeded quota: small, '
        "requested: pods=1, used: pods=1, limited: pods=1"
    ) in second.stderr
    used = kubectl.json("-n", "q", "get", "quota", "small")["status"]["used"]
    assert used == {"pods": "1"}
