"""Validation as the real API server does it, through raw HTTP: 422 Invalid with
``details.causes`` carrying upstream's field paths and messages, 400 for what upstream's
decoder refuses, 413 past the request size limit.

Each case is one upstream rule (docs/simcluster-conformance.md names the Go function it
follows); the messages are upstream's, so a client that parses them (kubectl prints them
verbatim) sees the same text as against a real cluster.
"""

from __future__ import annotations

import base64
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from simcluster.embedded import EmbeddedCluster

Obj = dict[str, Any]
PODS = "/api/v1/namespaces/t/pods"
RBAC = "/apis/rbac.authorization.k8s.io/v1"
APF = "/apis/flowcontrol.apiserver.k8s.io/v1"


def _token(kubeconfig: Path) -> str:
    return str(yaml.safe_load(kubeconfig.read_text())["users"][0]["user"]["token"])


@pytest.fixture(scope="module")
def http() -> Iterator[httpx.Client]:
    with EmbeddedCluster() as cluster:
        assert cluster.server is not None and cluster.server.certs is not None
        headers = {"Authorization": f"Bearer {_token(cluster.kubeconfig)}"}
        with httpx.Client(
            base_url=cluster.server.url,
            headers=headers,
            verify=cluster.server.certs.client_context(),
            timeout=30,
        ) as client:
            assert client.post("/api/v1/namespaces", json={"metadata": {"name": "t"}}).is_success
            yield client


def _pod(name: str, container: Obj | None = None, **spec: Any) -> Obj:
    c = {"name": "c", "image": "i:1", **(container or {})}
    return {"metadata": {"name": name}, "spec": {"containers": [c], **spec}}


def _res(**parts: Obj) -> Obj:
    return {"resources": parts}


def _meta(name: str, **meta: Any) -> Obj:
    return {"metadata": {"name": name, **meta}}


LABEL_MSG = "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-'"
# (id, path, body, field, message fragment)
INVALID = [
    ("pod-name", PODS, _pod("Bad_Name"), "metadata.name", "a lowercase RFC 1123 subdomain"),
    ("container-name", PODS, _pod("p", {"name": "C_1"}), "spec.containers[0].name", LABEL_MSG),
    (
        "container-name-unique",
        PODS,
        {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "i"}] * 2}},
        "spec.containers[1].name",
        'Duplicate value: "c"',
    ),
    (
        "image-required",
        PODS,
        _pod("p", {"image": ""}),
        "spec.containers[0].image",
        "Required value",
    ),
    (
        "restart-policy",
        PODS,
        _pod("p", restartPolicy="Sometimes"),
        "spec.restartPolicy",
        'Unsupported value: "Sometimes": supported values: "Always", "OnFailure", "Never"',
    ),
    (
        "dns-policy",
        PODS,
        _pod("p", dnsPolicy="Cluster"),
        "spec.dnsPolicy",
        'Unsupported value: "Cluster"',
    ),
    (
        "pull-policy",
        PODS,
        _pod("p", {"imagePullPolicy": "Sometimes"}),
        "spec.containers[0].imagePullPolicy",
        'supported values: "Always", "IfNotPresent", "Never"',
    ),
    (
        "container-port",
        PODS,
        _pod("p", {"ports": [{"containerPort": 0}]}),
        "spec.containers[0].ports[0].containerPort",
        "Invalid value: 0: must be between 1 and 65535, inclusive",
    ),
    (
        "env-name",
        PODS,
        _pod("p", {"env": [{"name": "1X", "value": "v"}]}),
        "spec.containers[0].env[0].name",
        "a valid environment variable name",
    ),
    (
        "volume-mount",
        PODS,
        _pod("p", {"volumeMounts": [{"name": "nope", "mountPath": "/x"}]}),
        "spec.containers[0].volumeMounts[0].name",
        'Not found: "nope"',
    ),
    (
        "negative-quantity",
        PODS,
        _pod("p", _res(requests={"cpu": "-1"})),
        "spec.containers[0].resources.requests[cpu]",
        'Invalid value: "-1": must be greater than or equal to 0',
    ),
    (
        "requests-over-limits",
        PODS,
        _pod("p", _res(requests={"memory": "2Gi"}, limits={"memory": "1Gi"})),
        "spec.containers[0].resources.requests[memory]",
        "must be less than or equal to memory limit of 1Gi",
    ),
    (
        "toleration-operator",
        PODS,
        _pod("p", tolerations=[{"key": "k", "operator": "Is"}]),
        "spec.tolerations[0].operator",
        'supported values: "Equal", "Exists"',
    ),
    (
        "label-key",
        PODS,
        {**_pod("p"), **_meta("p", labels={"a b": "x"})},
        "metadata.labels",
        'Invalid value: "a b": name part must consist of alphanumeric characters',
    ),
    (
        "label-value",
        PODS,
        {**_pod("p"), **_meta("p", labels={"k": "v" * 64})},
        "metadata.labels",
        "must be no more than 63 characters",
    ),
    (
        "annotations-size",
        PODS,
        {**_pod("p"), **_meta("p", annotations={"a": "x" * (256 * 1024)})},
        "metadata.annotations",
        "Too long: may not be more than 262144 bytes",
    ),
    (
        "finalizer-name",
        PODS,
        {**_pod("p"), **_meta("p", finalizers=["hold"])},
        "metadata.finalizers[0]",
        "name is neither a standard finalizer name nor is it fully qualified",
    ),
    (
        "owner-uid",
        PODS,
        {
            **_pod("p"),
            **_meta("p", ownerReferences=[{"apiVersion": "v1", "kind": "X", "name": "o"}]),
        },
        "metadata.ownerReferences[0].uid",
        "uid must not be empty",
    ),
    (
        "binding-target",
        "/api/v1/namespaces/t/bindings",
        {"metadata": {"name": "p"}, "target": {"kind": "Node"}},
        "target.name",
        "Required value",
    ),
    ("namespace-name", "/api/v1/namespaces", _meta("a.b"), "metadata.name", LABEL_MSG),
    (
        "configmap-key",
        "/api/v1/namespaces/t/configmaps",
        {**_meta("cm"), "data": {"a b": "v"}},
        "data[a b]",
        "a valid config key must consist of alphanumeric characters",
    ),
    (
        "configmap-size",
        "/api/v1/namespaces/t/configmaps",
        {**_meta("cm"), "data": {"k": "x" * (1024 * 1024 + 1)}},
        "",
        "Too long: must have at most 1048576 bytes",
    ),
    (
        "secret-key",
        "/api/v1/namespaces/t/secrets",
        {**_meta("s"), "stringData": {"a/b": "v"}},
        "stringData[a/b]",
        "a valid config key",
    ),
    (
        "serviceaccount-label",
        "/api/v1/namespaces/t/serviceaccounts",
        _meta("sa", labels={"-k": "v"}),
        "metadata.labels",
        "name part must consist of",
    ),
    (
        "lease-duration",
        "/apis/coordination.k8s.io/v1/namespaces/t/leases",
        {**_meta("l"), "spec": {"leaseDurationSeconds": 0}},
        "spec.leaseDurationSeconds",
        "Invalid value: 0: must be greater than 0",
    ),
    (
        "event-namespace",
        "/api/v1/namespaces/t/events",
        {**_meta("e"), "involvedObject": {"kind": "Pod", "name": "p", "namespace": "other"}},
        "involvedObject.namespace",
        'Invalid value: "other": does not match event.namespace',
    ),
    (
        "quota-negative",
        "/api/v1/namespaces/t/resourcequotas",
        {**_meta("q"), "spec": {"hard": {"pods": "-1"}}},
        "spec.hard[pods]",
        "must be greater than or equal to 0",
    ),
    (
        "role-verbs",
        f"{RBAC}/namespaces/t/roles",
        {**_meta("r"), "rules": [{"apiGroups": [""], "resources": ["pods"]}]},
        "rules[0].verbs",
        "Required value: verbs must contain at least one value",
    ),
    (
        "rolebinding-roleref",
        f"{RBAC}/namespaces/t/rolebindings",
        {
            **_meta("rb"),
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Foo", "name": "r"},
        },
        "roleRef.kind",
        'Unsupported value: "Foo": supported values: "Role", "ClusterRole"',
    ),
    (
        "flowschema-precedence",
        f"{APF}/flowschemas",
        {
            **_meta("fs"),
            "spec": {"matchingPrecedence": 0, "priorityLevelConfiguration": {"name": "x"}},
        },
        "spec.matchingPrecedence",
        "must be between 1 and 10000, inclusive",
    ),
    (
        "prioritylevel-type",
        f"{APF}/prioritylevelconfigurations",
        {**_meta("pl"), "spec": {"type": "Bogus"}},
        "spec.type",
        'Unsupported value: "Bogus": supported values: "Exempt", "Limited"',
    ),
]


@pytest.mark.parametrize(
    ("path", "body", "field", "fragment"), [c[1:] for c in INVALID], ids=[c[0] for c in INVALID]
)
def test_invalid_objects_get_422_with_upstreams_cause(
    http: httpx.Client, path: str, body: Obj, field: str, fragment: str
) -> None:
    r = http.post(path, json=body)
    assert r.status_code == 422, r.text
    status = r.json()
    assert status["reason"] == "Invalid"
    causes = status["details"]["causes"]
    # an empty field is left out of the cause (omitempty), as upstream encodes it
    assert any(c.get("field", "") == field and fragment in c["message"] for c in causes), causes
    assert fragment in status["message"]


# (id, path, body, message fragment)
UNDECODABLE = [
    (
        "pod-quantity",
        PODS,
        _pod("p", _res(limits={"cpu": "lots"})),
        'Pod in version "v1" cannot be handled as a Pod: quantities must match the regular',
    ),
    (
        "quota-quantity",
        "/api/v1/namespaces/t/resourcequotas",
        {**_meta("q"), "spec": {"hard": {"cpu": "1x"}}},
        "cannot be handled as a ResourceQuota: quantities must match",
    ),
    (
        "configmap-value",
        "/api/v1/namespaces/t/configmaps",
        {**_meta("cm"), "data": {"k": 1}},
        "json: cannot unmarshal number into Go struct field ConfigMap.data of type string",
    ),
    (
        "secret-base64",
        "/api/v1/namespaces/t/secrets",
        {**_meta("s"), "data": {"k": "not base64!"}},
        "illegal base64 data at input byte 3",
    ),
]


@pytest.mark.parametrize(
    ("path", "body", "fragment"), [c[1:] for c in UNDECODABLE], ids=[c[0] for c in UNDECODABLE]
)
def test_undecodable_objects_get_400_as_upstreams_decoder(
    http: httpx.Client, path: str, body: Obj, fragment: str
) -> None:
    r = http.post(path, json=body)
    assert r.status_code == 400, r.text
    assert r.json()["reason"] == "BadRequest"
    assert fragment in r.json()["message"]


def test_several_causes_are_reported_together_as_upstreams_aggregate(http: httpx.Client) -> None:
    body = _pod("p", {"name": "C"}, restartPolicy="Sometimes")
    status = http.post(PODS, json=body).json()
    assert [c["field"] for c in status["details"]["causes"]] == [
        "spec.containers[0].name",
        "spec.restartPolicy",
    ]
    assert status["message"].startswith('Pod "p" is invalid: [spec.containers[0].name: ')


def test_a_bad_pod_is_422_before_quota_admission(http: httpx.Client) -> None:
    quota = {**_meta("zero"), "spec": {"hard": {"pods": "0"}}}
    assert http.post("/api/v1/namespaces/t/resourcequotas", json=quota).status_code == 201
    try:
        assert http.post(PODS, json=_pod("p", {"name": "C"})).status_code == 422
        assert http.post(PODS, json=_pod("p")).status_code == 403
    finally:
        http.delete("/api/v1/namespaces/t/resourcequotas/zero")


def test_pod_update_rules(http: httpx.Client) -> None:
    assert http.post(PODS, json=_pod("upd")).status_code == 201
    merge = {"Content-Type": "application/merge-patch+json"}
    r = http.patch(f"{PODS}/upd", json={"spec": {"restartPolicy": "Never"}}, headers=merge)
    assert r.status_code == 422
    assert "pod updates may not change fields" in r.json()["message"]
    r = http.patch(f"{PODS}/upd", json={"metadata": {"labels": {"a b": "c"}}}, headers=merge)
    assert r.status_code == 422
    assert r.json()["details"]["causes"][0]["field"] == "metadata.labels"
    r = http.patch(
        f"{PODS}/upd",
        json={"spec": {"containers": [{"name": "c", "resources": {"limits": {"cpu": "x"}}}]}},
        headers={"Content-Type": "application/strategic-merge-patch+json"},
    )
    assert r.status_code == 400
    http.delete(f"{PODS}/upd")


def test_no_new_finalizers_on_an_object_being_deleted(http: httpx.Client) -> None:
    cms = "/api/v1/namespaces/t/configmaps"
    body = {**_meta("held", finalizers=["example.com/hold"]), "data": {}}
    assert http.post(cms, json=body).status_code == 201
    assert http.delete(f"{cms}/held").status_code == 200
    merge = {"Content-Type": "application/merge-patch+json"}
    add = {"metadata": {"finalizers": ["example.com/hold", "example.com/more"]}}
    r = http.patch(f"{cms}/held", json=add, headers=merge)
    assert r.status_code == 422
    cause = r.json()["details"]["causes"][0]
    assert cause["reason"] == "FieldValueForbidden"
    assert cause["field"] == "metadata.finalizers"
    assert cause["message"] == (
        "Forbidden: no new finalizers can be added if the object is being deleted, "
        'found new finalizers []string{"example.com/more"}'
    )
    # removing the last finalizer is allowed, and completes the deletion
    r = http.patch(f"{cms}/held", json={"metadata": {"finalizers": None}}, headers=merge)
    assert r.status_code == 200
    assert http.get(f"{cms}/held").status_code == 404


def test_a_role_bindings_role_ref_is_immutable(http: httpx.Client) -> None:
    path = f"{RBAC}/namespaces/t/rolebindings"
    ref = {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "a"}
    assert http.post(path, json={**_meta("rb"), "roleRef": ref}).status_code == 201
    merge = {"Content-Type": "application/merge-patch+json"}
    r = http.patch(f"{path}/rb", json={"roleRef": {"name": "b"}}, headers=merge)
    assert r.status_code == 422
    assert r.json()["details"]["causes"][0]["message"].endswith(": cannot change roleRef")


def test_request_body_size_limit(http: httpx.Client) -> None:
    # over 1 MiB (aiohttp's default cap, which answered 500) and under 3 MiB: validated
    big = {**_meta("big"), "data": {"k": base64.b64encode(b"x" * (1536 * 1024)).decode()}}
    r = http.post("/api/v1/namespaces/t/secrets", json=big)
    assert r.status_code == 422, r.text
    # over upstream's 3 MiB: 413
    huge = {**_meta("huge"), "data": {"k": "x" * (3 * 1024 * 1024)}}
    r = http.post("/api/v1/namespaces/t/configmaps", json=huge)
    assert r.status_code == 413
    assert r.json()["reason"] == "RequestEntityTooLarge"
    assert r.json()["message"] == "Request entity too large: limit is 3145728"


def test_binding_names_must_match_the_url(http: httpx.Client) -> None:
    assert http.post(PODS, json=_pod("bound")).status_code == 201
    target = {"kind": "Node", "name": "n1"}
    for meta in ({"name": "other"}, {}):
        r = http.post(f"{PODS}/bound/binding", json={"metadata": meta, "target": target})
        assert r.status_code == 400
        assert r.json()["message"] == "name in URL does not match name in Binding object"
    r = http.post("/api/v1/namespaces/t/bindings", json={"metadata": {}, "target": target})
    assert r.status_code == 400
    assert r.json()["message"] == "resource name may not be empty"
    assert http.get(f"{PODS}/bound").json()["spec"].get("nodeName") is None
    http.delete(f"{PODS}/bound")
