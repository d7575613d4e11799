"""Conformance through the real kubectl binary (client-go): discovery, client-side apply
(strategic merge patch), table printing, selectors, label/annotate, delete, bindings, quota
and the error Status objects kubectl prints."""

from __future__ import annotations

import re
import subprocess

import httpx
import pytest

from simcluster.embedded import EmbeddedCluster
from tests.support.kubectl import Kubectl, admin_http
from tests.support.wait import wait_until

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
    assert "admin" in kubectl.run("auth", "whoami").stdout
    assert kubectl.run("auth", "can-i", "create", "pods").stdout.strip() == "yes"


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


def test_imperative_create_sends_protobuf(kubectl: Kubectl) -> None:
    """kubectl's typed clients send protobuf: the kinds they create are decoded."""
    assert "namespace/imp created" in kubectl.run("create", "namespace", "imp").stdout
    kubectl.run("-n", "imp", "create", "configmap", "c", "--from-literal=k=v")
    assert kubectl.json("-n", "imp", "get", "cm", "c")["data"] == {"k": "v"}
    kubectl.run("-n", "imp", "create", "secret", "generic", "s", "--from-literal=pw=hunter2")
    assert kubectl.json("-n", "imp", "get", "secret", "s")["data"] == {"pw": "aHVudGVyMg=="}
    kubectl.run("-n", "imp", "create", "serviceaccount", "robot")
    token = kubectl.run("-n", "imp", "create", "token", "robot").stdout.strip()
    assert len(token) > 20
    other = kubectl.run("-n", "imp", "create", "deployment", "d", "--image=x:1", check=False)
    assert "simcluster decodes protobuf bodies only for" in other.stderr


CRD = """
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: sandboxclaims.sandman.io}
spec:
  group: sandman.io
  scope: Namespaced
  names: {plural: sandboxclaims, singular: sandboxclaim, kind: SandboxClaim, shortNames: [sbc]}
  versions:
  - name: v1alpha1
    served: true
    storage: true
    subresources: {status: {}}
    schema: {openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}}
"""
CLAIM = """
apiVersion: sandman.io/v1alpha1
kind: SandboxClaim
metadata: {name: c1, namespace: default}
spec: {image: "task:1", count: 1}
"""


def test_crd_and_custom_resources(kubectl: Kubectl) -> None:
    kubectl.run("apply", "-f", "-", stdin=CRD)
    crd = kubectl.json("get", "crd", "sandboxclaims.sandman.io")
    assert {"type": "Established", "status": "True"}.items() <= crd["status"]["conditions"][
        1
    ].items()
    assert "sandboxclaims" in kubectl.run("api-resources", "--api-group=sandman.io").stdout
    kubectl.run("apply", "-f", "-", stdin=CLAIM)
    kubectl.run("apply", "-f", "-", stdin=CLAIM.replace("count: 1", "count: 3"))  # merge patch
    claim = kubectl.json("get", "sbc", "c1")
    assert claim["spec"] == {"image": "task:1", "count": 3}
    assert claim["metadata"]["generation"] == 2
    kubectl.run(
        "patch",
        "sbc",
        "c1",
        "--subresource=status",
        "--type=merge",
        "-p",
        '{"status": {"ready": 1}}',
    )
    assert kubectl.json("get", "sbc", "c1")["status"] == {"ready": 1}
    smp = kubectl.run("patch", "sbc", "c1", "-p", '{"spec": {"count": 4}}', check=False)
    assert "application/strategic-merge-patch+json is not supported by sandman.io" in smp.stderr
    kubectl.run("delete", "crd", "sandboxclaims.sandman.io")
    assert kubectl.run("get", "sbc", check=False).returncode != 0


def test_wait_describe_and_events(cluster_with_nodes: Kubectl) -> None:
    kubectl = cluster_with_nodes
    kubectl.run("apply", "-f", "-", stdin=MANIFEST)
    binding = (
        "apiVersion: v1\nkind: Binding\nmetadata: {name: p1, namespace: demo}\n"
        "target: {name: node-0}\n"
    )
    kubectl.run("create", "-f", "-", stdin=binding)
    kubectl.run("-n", "demo", "wait", "--for=condition=Ready", "pod/p1", "--timeout=20s")
    uid = kubectl.json("-n", "demo", "get", "pod", "p1")["metadata"]["uid"]
    event = (
        "apiVersion: v1\nkind: Event\nmetadata: {name: p1.1, namespace: demo}\n"
        f"involvedObject: {{kind: Pod, name: p1, namespace: demo, uid: {uid}}}\n"
        "reason: Tested\nmessage: hello\ntype: Normal\n"
    )
    kubectl.run("create", "-f", "-", stdin=event)
    described = kubectl.run("-n", "demo", "describe", "pod", "p1").stdout
    assert "Node:" in described
    assert "node-0/127.1.0.1" in described
    assert "Tested" in described
    kubectl.run("-n", "demo", "delete", "pod", "p1", "--timeout=20s")  # waits for the kubelet


OPERATOR = """
apiVersion: v1
kind: Namespace
metadata: {name: sandman-system}
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: sandman-controller, namespace: sandman-system}
automountServiceAccountToken: true
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: "sandman:controller"}
rules:
- apiGroups: [""]
  resources: [pods, pods/binding]
  verbs: [get, list, watch, create, delete]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: "sandman:controller"}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: "sandman:controller"}
subjects: [{kind: ServiceAccount, name: sandman-controller, namespace: sandman-system}]
---
apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata: {name: sandman-sandbox}
value: 1000
preemptionPolicy: Never
---
apiVersion: flowcontrol.apiserver.k8s.io/v1
kind: PriorityLevelConfiguration
metadata: {name: sandman}
spec:
  type: Limited
  limited:
    nominalConcurrencyShares: 30
    limitResponse: {type: Queue, queuing: {queues: 16, handSize: 4, queueLengthLimit: 50}}
---
apiVersion: flowcontrol.apiserver.k8s.io/v1
kind: FlowSchema
metadata: {name: sandman}
spec:
  priorityLevelConfiguration: {name: sandman}
  matchingPrecedence: 500
  distinguisherMethod: {type: ByUser}
  rules:
  - subjects:
    - kind: ServiceAccount
      serviceAccount: {name: sandman-controller, namespace: sandman-system}
    resourceRules: [{verbs: ["*"], apiGroups: ["*"], resources: ["*"], namespaces: ["*"]}]
---
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: sandboxes, namespace: sandman-system}
spec:
  podSelector: {matchLabels: {sandman.io/sandbox: "true"}}
  ingress: [{from: [{podSelector: {matchLabels: {app: sandman-facade}}}]}]
---
apiVersion: apps/v1
kind: DaemonSet
metadata: {name: node-agent, namespace: sandman-system}
spec:
  selector: {matchLabels: {app: node-agent}}
  template:
    metadata: {labels: {app: node-agent}}
    spec: {containers: [{name: agent, image: "sandman/node-agent:0.1"}]}
---
apiVersion: v1
kind: Service
metadata: {name: facade, namespace: sandman-system}
spec:
  selector: {app: sandman-facade}
  ports: [{name: http, port: 80, targetPort: 8080}]
---
apiVersion: node.k8s.io/v1
kind: RuntimeClass
metadata: {name: gvisor}
handler: runsc
---
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata: {name: facade, namespace: sandman-system}
spec: {minAvailable: 1, selector: {matchLabels: {app: sandman-facade}}}
"""


def test_operator_manifests_apply_twice(kubectl: Kubectl) -> None:
    first = kubectl.run("apply", "-f", "-", stdin=OPERATOR).stdout
    assert first.count(" created") == 12
    rv = kubectl.json("-n", "sandman-system", "get", "pdb", "facade")["metadata"]["resourceVersion"]
    second = kubectl.run("apply", "-f", "-", stdin=OPERATOR).stdout
    assert second.count(" unchanged") == 11
    # upstream too: the PDB selector is patchStrategy=replace, so kubectl always sends it and
    # says "configured"; the server sees a no-op and writes nothing
    assert "poddisruptionbudget.policy/facade configured" in second
    assert (
        kubectl.json("-n", "sandman-system", "get", "pdb", "facade")["metadata"]["resourceVersion"]
        == rv
    )
    svc = kubectl.json("-n", "sandman-system", "get", "svc", "facade")
    assert svc["spec"]["clusterIP"].startswith("10.96.")
    assert svc["spec"]["ports"][0]["protocol"] == "TCP"
    changed = OPERATOR.replace("nominalConcurrencyShares: 30", "nominalConcurrencyShares: 40")
    assert (
        "prioritylevelconfiguration.flowcontrol.apiserver.k8s.io/sandman configured"
        in kubectl.run("apply", "-f", "-", stdin=changed).stdout
    )
    assert "sandman:controller" in kubectl.run("get", "clusterroles").stdout


def requests_served(http: httpx.Client, **labels: str) -> float:
    """The sum of simcluster's ``apiserver_request_total`` samples matching ``labels``, read
    from its /metrics endpoint."""
    total = 0.0
    for line in http.get("/metrics").text.splitlines():
        if line.startswith("apiserver_request_total{"):
            found = dict(re.findall(r'(\w+)="([^"]*)"', line))
            if all(found.get(k) == v for k, v in labels.items()):
                total += float(line.rsplit(" ", 1)[1])
    return total


def test_watch_and_429_retry_after(cluster: EmbeddedCluster, kubectl: Kubectl) -> None:
    """`kubectl get -w` streams Table rows; a 429 with Retry-After is retried by client-go, so
    kubectl still succeeds."""
    assert cluster.server is not None
    kubectl.run("apply", "-f", "-", stdin=MANIFEST.split("---")[0])
    watchers = cluster.server.store.all_watchers
    before = len(watchers())
    with kubectl.popen(
        "-n", "demo", "get", "pods", "-w", "--request-timeout=10s", stdout=subprocess.PIPE
    ) as watcher:
        stdout = watcher.stdout
        assert stdout is not None
        # w1 must arrive through the watch, not in the list before it
        wait_until(lambda: len(watchers()) > before, what="kubectl's watch to be registered")
        kubectl.run("-n", "demo", "run", "w1", "--image=busybox:1")
        lines: list[str] = []

        def streamed() -> bool:  # a blocking read, bounded by kubectl's --request-timeout
            lines.append(stdout.readline())
            if not lines[-1]:
                pytest.fail(f"the watch ended without w1: {lines}")
            return lines[-1].startswith("w1 ") and "Pending" in lines[-1]

        wait_until(streamed, timeout_s=10, interval_s=0.001)
        watcher.terminate()  # the row came while the watch was open
    assert lines[0].split()[:3] == ["NAME", "READY", "STATUS"]
    fault = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: f, namespace: demo}\n"
    refused = {"code": "429", "resource": "configmaps", "verb": "create", "user": "admin"}
    with admin_http(kubectl.kubeconfig) as http:
        # Every create is refused until one 429 has been served, then none: kubectl succeeds
        # only if client-go waited out the Retry-After and sent the create again.
        http.post(
            "/admin/faults", json={"kind": "api-errors", "verb": "create", "rate": 1.0, "code": 429}
        )
        with kubectl.popen(
            "create", "-f", "-", stdin=subprocess.PIPE, stdout=subprocess.PIPE
        ) as creating:
            assert creating.stdin is not None and creating.stdout is not None
            creating.stdin.write(fault)
            creating.stdin.close()
            try:
                served = wait_until(
                    lambda: requests_served(http, **refused), what="a 429 served to the create"
                )
            finally:
                http.post("/admin/faults", json={"kind": "clear"})
            assert creating.wait(timeout=20) == 0  # its error, if any, is in the captured stderr
            assert creating.stdout.read().strip() == "configmap/f created"
        assert served >= 1
        created = requests_served(http, code="201", resource="configmaps", verb="create")
        assert created == 1
    assert kubectl.json("-n", "demo", "get", "cm", "f")["metadata"]["name"] == "f"
