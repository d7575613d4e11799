"""RBAC enforced (``authorization: rbac``): upstream's Forbidden messages as kubectl prints
them, ``kubectl auth can-i`` (and ``--list``) telling the truth, rule matching (subresources,
resourceNames, nonResourceURLs, aggregation, missing roles) through SubjectAccessReviews, the
node identities' rules, and the request attributes upstream derives from a URL."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from simcluster.apiserver import ServerSettings, service_account_user
from simcluster.apiserver.auth import User
from simcluster.apiserver.dispatch import parse_path
from simcluster.apiserver.rbac import request_attributes
from simcluster.cluster import ClusterSettings
from simcluster.embedded import EmbeddedCluster
from simcluster.kubelet.settings import NodeSettings
from simcluster.profile import ProfileError, load_profile
from tests.support.kubectl import Kubectl, admin_http

SA = "system:serviceaccount:x:sa"
ROLE = """
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: pod-reader, namespace: x}
rules:
- {apiGroups: [""], resources: [pods], verbs: [get, list, watch, create]}
- {apiGroups: [""], resources: [configmaps], verbs: [get, patch]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: sa-reads-pods, namespace: x}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: pod-reader}
subjects: [{kind: ServiceAccount, name: sa, namespace: x}]
"""


@pytest.fixture(scope="module")
def rbac_cluster() -> Iterator[EmbeddedCluster]:
    settings = ClusterSettings(
        server=ServerSettings(authorization="rbac"),
        nodes=1,
        node=NodeSettings(start_latency_s=0.05),
    )
    with EmbeddedCluster(settings) as c:
        Kubectl(c.kubeconfig).run("create", "namespace", "x")
        Kubectl(c.kubeconfig).run("create", "namespace", "y")
        yield c


def _sa_kubectl(cluster: EmbeddedCluster, tmp_path: Path, ns: str, name: str) -> Kubectl:
    assert cluster.server is not None
    return Kubectl(cluster.server.kubeconfig(tmp_path / name, service_account_user(ns, name)))


def _forbidden(k: Kubectl, *args: str, stdin: str | None = None) -> str:
    proc = k.run(*args, stdin=stdin, check=False)
    assert proc.returncode != 0, proc.stdout
    return proc.stderr.strip()


def test_kubectl_sees_upstream_forbidden_messages_and_truthful_can_i(
    rbac_cluster: EmbeddedCluster, tmp_path: Path
) -> None:
    admin = Kubectl(rbac_cluster.kubeconfig)
    sa = _sa_kubectl(rbac_cluster, tmp_path, "x", "sa")
    denied = "Error from server (Forbidden): "
    assert _forbidden(sa, "get", "pods", "-n", "x") == (
        f'{denied}pods is forbidden: User "{SA}" cannot list resource "pods" in API group "" '
        'in the namespace "x"'
    )
    assert _forbidden(sa, "get", "nodes") == (
        f'{denied}nodes is forbidden: User "{SA}" cannot list resource "nodes" in API group "" '
        "at the cluster scope"
    )
    assert _forbidden(sa, "get", "leases.coordination.k8s.io", "l", "-n", "x") == (
        f'{denied}leases.coordination.k8s.io "l" is forbidden: User "{SA}" cannot get resource '
        '"leases" in API group "coordination.k8s.io" in the namespace "x"'
    )
    assert sa.run("auth", "can-i", "list", "pods", "-n", "x", check=False).stdout.strip() == "no"
    # discovery and whoami work for every authenticated user (system:discovery, basic-user)
    assert "pods" in sa.run("api-resources").stdout
    assert SA in sa.run("auth", "whoami").stdout

    as_sa = ("--as", SA)  # impersonation: the operator's way to check a service account
    assert admin.run("auth", "can-i", "list", "pods", "-n", "x", *as_sa, check=False).stdout == (
        "no\n"
    )
    assert _forbidden(sa, "get", "pods", "--as", "bob") == (
        f'{denied}users "bob" is forbidden: User "{SA}" cannot impersonate resource "users" in '
        'API group "" at the cluster scope'
    )
    admin.run("apply", "-f", "-", stdin=ROLE)
    assert admin.run("auth", "can-i", "list", "pods", "-n", "x", *as_sa).stdout == "yes\n"
    assert sa.run("auth", "can-i", "list", "pods", "-n", "x").stdout.strip() == "yes"
    assert sa.run("auth", "can-i", "list", "pods", "-n", "y", check=False).stdout.strip() == "no"
    assert "No resources found" in sa.run("get", "pods", "-n", "x").stderr
    sa.run("run", "p", "-n", "x", "--image", "i:1")
    assert _forbidden(sa, "delete", "pod", "p", "-n", "x") == (
        f'{denied}pods "p" is forbidden: User "{SA}" cannot delete resource "pods" in API group '
        '"" in the namespace "x"'
    )
    binding = '{"apiVersion":"v1","kind":"Binding","metadata":{"name":"p"},'
    binding += '"target":{"kind":"Node","name":"node-0"}}'
    raw = "/api/v1/namespaces/x/pods/p/binding"
    assert _forbidden(sa, "create", "--raw", raw, "-f", "-", stdin=binding) == (
        f'{denied}pods "p" is forbidden: User "{SA}" cannot create resource "pods/binding" in '
        'API group "" in the namespace "x"'
    )
    assert _forbidden(sa, "get", "--raw", "/metrics") == (
        f'{denied}forbidden: User "{SA}" cannot get path "/metrics"'
    )
    listed = sa.run("auth", "can-i", "--list", "-n", "x").stdout
    assert any(
        line.split()[0] == "pods" and "[create get list watch]" in line
        for line in listed.splitlines()
    )
    # a server-side apply that would create the object needs create too (upstream's
    # withAuthorization: the message is only the authorizer's reason, here none)
    cm = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c, namespace: x}\ndata: {k: v}\n"
    apply = ("apply", "--server-side", "-f", "-")
    assert _forbidden(sa, *apply, stdin=cm) == f'{denied}configmaps "c" is forbidden:'
    admin.run(*apply, stdin=cm)
    assert "serverside-applied" in sa.run(*apply, stdin=cm.replace("k: v", "k: w")).stdout
    # the node's rules let its kubelet run a bound pod under RBAC
    admin.run("create", "--raw", raw, "-f", "-", stdin=binding)
    admin.run("wait", "--for=condition=Ready", "pod/p", "-n", "x", "--timeout=20s")


RULES: dict[str, Any] = {
    "apiVersion": "rbac.authorization.k8s.io/v1",
    "kind": "ClusterRole",
    "metadata": {"name": "picky", "labels": {"agg": "yes"}},
    "rules": [
        {"apiGroups": [""], "resources": ["pods/status"], "verbs": ["patch"]},
        {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"], "resourceNames": ["c"]},
        {"apiGroups": ["apps"], "resources": ["*/scale"], "verbs": ["update"]},
        {"apiGroups": ["*"], "resources": ["leases"], "verbs": ["*"]},
        {"nonResourceURLs": ["/metrics", "/logs/*"], "verbs": ["get"]},
    ],
}


def _review(http: Any, user: str, groups: list[str], **attrs: str) -> dict[str, Any]:
    spec: dict[str, Any] = {"user": user, "groups": groups}
    if "path" in attrs:
        spec["nonResourceAttributes"] = attrs
    else:
        spec["resourceAttributes"] = attrs
    body = {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "spec": spec}
    r = http.post("/apis/authorization.k8s.io/v1/subjectaccessreviews", json=body)
    assert r.status_code == 201, r.text
    status: dict[str, Any] = r.json()["status"]
    return status


ALLOWED = [
    {"verb": "patch", "resource": "pods", "subresource": "status", "namespace": "x"},
    {"verb": "get", "resource": "configmaps", "name": "c", "namespace": "x"},
    {"verb": "update", "group": "apps", "resource": "deployments", "subresource": "scale"},
    {"verb": "deletecollection", "group": "coordination.k8s.io", "resource": "leases"},
    {"verb": "get", "path": "/metrics"},
    {"verb": "get", "path": "/logs/kubelet.log"},
]
DENIED = [
    {"verb": "patch", "resource": "pods", "namespace": "x"},  # the subresource only
    {"verb": "update", "resource": "pods", "subresource": "status", "namespace": "x"},
    {"verb": "get", "resource": "configmaps", "name": "d", "namespace": "x"},
    {"verb": "list", "resource": "configmaps", "namespace": "x"},  # resourceNames: no list
    {"verb": "update", "group": "apps", "resource": "deployments"},
    {"verb": "post", "path": "/metrics"},
    {"verb": "get", "path": "/logs"},
]


def test_rule_matching_through_subject_access_reviews(rbac_cluster: EmbeddedCluster) -> None:
    with admin_http(rbac_cluster.kubeconfig) as http:
        rbac = "/apis/rbac.authorization.k8s.io/v1"
        assert http.post(f"{rbac}/clusterroles", json=RULES).status_code == 201
        aggregated = {
            "metadata": {"name": "aggregated"},
            "aggregationRule": {"clusterRoleSelectors": [{"matchLabels": {"agg": "yes"}}]},
        }
        assert http.post(f"{rbac}/clusterroles", json=aggregated).status_code == 201
        for name, role, group in (("g1", "aggregated", "team"), ("g2", "gone", "lost")):
            crb = {
                "metadata": {"name": name},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole"}
                | {"name": role},
                "subjects": [
                    {"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": group}
                ],
            }
            assert http.post(f"{rbac}/clusterrolebindings", json=crb).status_code == 201
        for attrs in ALLOWED:
            status = _review(http, "u", ["team"], **attrs)
            assert status["allowed"], attrs
            assert status["reason"] == (
                'RBAC: allowed by ClusterRoleBinding "g1" of ClusterRole "aggregated" '
                'to Group "team"'
            )
        for attrs in DENIED:
            assert not _review(http, "u", ["team"], **attrs)["allowed"], attrs
        missing = _review(http, "v", ["lost"], verb="get", resource="pods", namespace="x")
        assert missing == {
            "allowed": False,
            "reason": 'RBAC: clusterrole.rbac.authorization.k8s.io "gone" not found',
        }
        node = ["system:nodes", "system:authenticated"]
        own = {"group": "coordination.k8s.io", "resource": "leases", "namespace": "kube-node-lease"}
        assert _review(http, "system:node:node-0", node, verb="update", name="node-0", **own)[
            "allowed"
        ]
        assert not _review(http, "system:node:node-0", node, verb="update", name="node-1", **own)[
            "allowed"
        ]
        # a bad review is a 422, never a 500
        bad = {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview"}
        r = http.post("/apis/authorization.k8s.io/v1/subjectaccessreviews", json=bad)
        assert (r.status_code, r.json()["reason"]) == (422, "Invalid")


@pytest.mark.parametrize(
    ("method", "path", "query", "expected"),
    [
        ("GET", "/api/v1/pods", {}, ("list", "pods", "", "", "")),
        ("GET", "/api/v1/namespaces/x/pods", {"watch": "1"}, ("watch", "pods", "", "x", "")),
        ("GET", "/api/v1/namespaces/x/pods/p", {}, ("get", "pods", "", "x", "p")),
        ("DELETE", "/api/v1/namespaces/x/pods", {}, ("deletecollection", "pods", "", "x", "")),
        (
            "POST",
            "/api/v1/namespaces/x/pods/p/binding",
            {},
            ("create", "pods", "binding", "x", "p"),
        ),
        ("GET", "/api/v1/namespaces/x/pods/p/log", {}, ("get", "pods", "log", "x", "p")),
        ("GET", "/api/v1/namespaces/x", {}, ("get", "namespaces", "", "x", "x")),
        (
            "PUT",
            "/api/v1/namespaces/x/finalize",
            {},
            ("update", "namespaces", "finalize", "x", "x"),
        ),
        (
            "GET",
            "/apis/coordination.k8s.io/v1/namespaces/x/leases",
            {"fieldSelector": "metadata.name=l", "watch": "true"},
            ("watch", "leases", "", "x", "l"),
        ),
        ("PATCH", "/api/v1/nodes/n/status", {}, ("patch", "nodes", "status", "", "n")),
    ],
)
def test_request_attributes_as_upstream_request_info(
    method: str, path: str, query: dict[str, str], expected: tuple[str, ...]
) -> None:
    info = parse_path(method, path, query)
    assert info is not None
    a = request_attributes(info, User("u"), query)
    assert (a.verb, a.resource, a.subresource, a.namespace, a.name) == expected


def test_authorization_setting_is_checked() -> None:
    assert load_profile("ci").server.authorization == "always-allow"
    rbac = load_profile("ci", {"apiserver.authorization": "rbac"})
    assert rbac.server.authorization == "rbac"
    with pytest.raises(ProfileError, match=r"apiserver\.authorization: 'abac' is not one of"):
        load_profile("ci", {"apiserver.authorization": "abac"})
