"""Flow control configured by applied FlowSchema / PriorityLevelConfiguration objects: a
level's nominalConcurrencyShares as its share of the server's budget, matching by subject,
verb, resource, namespace and non-resource URL in matchingPrecedence order, and binds given a
level of their own by a FlowSchema, seen in the server's per-level metrics."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, config
from kubernetes.client.rest import ApiException

from simcluster.apiserver import ServerSettings, service_account_user
from simcluster.apiserver.apf_objects import level_of, schema_of
from simcluster.apiserver.auth import User
from simcluster.apiserver.flowcontrol import default_flow_control
from simcluster.apiserver.rbac import Attributes
from simcluster.embedded import EmbeddedCluster
from tests.support.kubectl import admin_http

APF = "flowcontrol.apiserver.k8s.io/v1"
#: shares: node-high 40 + workload-low 100 + global-default 20 (+ binds 40 once applied);
#: workload-low gets 100/160 of the burst of 16: 10 (the rate is tiny, so that no token
#: comes back during the test however slow the machine)
FLOW = {
    "server": {"mutating": {"rate": 0.02, "burst": 16}},
    "levels": {"workload-low": {"max_queue_wait_s": 0}},
}


def _plc(name: str, shares: int) -> dict[str, Any]:
    limited = {"nominalConcurrencyShares": shares, "limitResponse": {"type": "Reject"}}
    return {
        "apiVersion": APF,
        "kind": "PriorityLevelConfiguration",
        "metadata": {"name": name},
        "spec": {"type": "Limited", "limited": limited},
    }


def _fs(name: str, level: str, precedence: int, rule: dict[str, Any]) -> dict[str, Any]:
    spec = {
        "priorityLevelConfiguration": {"name": level},
        "matchingPrecedence": precedence,
        "rules": [rule],
    }
    return {"apiVersion": APF, "kind": "FlowSchema", "metadata": {"name": name}, "spec": spec}


BINDS = _fs(
    "binds",
    "binds",
    500,
    {
        "subjects": [{"kind": "ServiceAccount", "serviceAccount": {"namespace": "t", "name": "*"}}],
        "resourceRules": [
            {"verbs": ["create"], "apiGroups": [""], "resources": ["pods/binding"]}
            | {"namespaces": ["*"]}
        ],
    },
)


def _pod(name: str) -> dict[str, Any]:
    return {"metadata": {"name": name}, "spec": {"containers": [{"name": "c", "image": "i:1"}]}}


def _flood(v1: client.CoreV1Api, prefix: str) -> list[str]:
    """Create pods until the level says 429; the names created."""
    created = []
    for i in range(40):
        try:
            v1.create_namespaced_pod("t", _pod(f"{prefix}{i}"))
        except ApiException as e:
            if e.status != 429:
                raise
            return created
        created.append(f"{prefix}{i}")
    raise AssertionError("the create flood was never limited")


def _bind(v1: client.CoreV1Api, name: str) -> int:
    body = {"metadata": {"name": name}, "target": {"kind": "Node", "name": "node-0"}}
    try:
        v1.create_namespaced_pod_binding(name, "t", body, _preload_content=False)
    except ApiException as e:
        return int(e.status)
    return 201


def test_a_flow_schema_gives_binds_their_own_budget(tmp_path: Path) -> None:
    with EmbeddedCluster(ServerSettings(flowcontrol=FLOW)) as cluster:
        assert cluster.server is not None
        with admin_http(cluster.kubeconfig) as http:
            assert http.post("/api/v1/namespaces", json={"metadata": {"name": "t"}}).is_success
            kubeconfig = cluster.server.kubeconfig(tmp_path / "sa", service_account_user("t", "c"))
            cfg = client.Configuration()
            config.load_kube_config(config_file=str(kubeconfig), client_configuration=cfg)
            cfg.retries = 0
            with client.ApiClient(cfg) as api:
                v1 = client.CoreV1Api(api)
                pods = _flood(v1, "a")
                assert len(pods) == 10  # workload-low's burst
                assert _bind(v1, pods[0]) == 429  # binds share the creates' empty bucket
                for obj, plural in ((_plc("binds", 40), "prioritylevelconfigurations"),):
                    assert http.post(f"/apis/{APF}/{plural}", json=obj).status_code == 201
                assert http.post(f"/apis/{APF}/flowschemas", json=BINDS).status_code == 201
                pods = _flood(v1, "b")
                assert len(pods) == 8  # workload-low now has 100/200 of the budget
                # binds: 40/200 of the server's burst of 16 is 3, the creates' level is empty
                assert [_bind(v1, p) for p in pods[:4]] == [201, 201, 201, 429]
            metrics = _samples(http.get("/metrics").text)
    level = 'flow_schema="binds",priority_level="binds"'
    assert metrics[f"apiserver_flowcontrol_dispatched_requests_total{{{level}}}"] == 3
    assert metrics[f"apiserver_flowcontrol_rejected_requests_total{{{level}}}"] == 1
    rate = 'simcluster_flowcontrol_budget_requests_per_second{class="mutating",priority_level='
    assert metrics[f'{rate}"binds"}}'] == pytest.approx(0.02 * 40 / 200)
    assert metrics[f'{rate}"workload-low"}}'] == pytest.approx(0.02 * 100 / 200)
    rejected = 'flow_schema="service-accounts",priority_level="workload-low"'
    assert metrics[f"apiserver_flowcontrol_rejected_requests_total{{{rejected}}}"] == 3


def _samples(text: str) -> dict[str, float]:
    lines = (line.rpartition(" ") for line in text.splitlines() if not line.startswith("#"))
    return {name: float(value) for name, _, value in lines if name}


def _attrs(user: User, verb: str, resource: str = "", namespace: str = "", **kw: Any) -> Attributes:
    if "path" in kw:
        return Attributes(user, verb, False, path=kw["path"])
    return Attributes(user, verb, True, kw.get("group", ""), "v1", resource, "", namespace)


SA = User("system:serviceaccount:t:c", ("system:serviceaccounts", "system:serviceaccounts:t"))
BOB = User("bob", ("devs",))
SCHEMAS = [
    _fs(
        "reads-in-t",
        "slow",
        800,
        {
            "subjects": [{"kind": "Group", "group": {"name": "*"}}],
            "resourceRules": [
                {"verbs": ["get", "list"], "apiGroups": ["*"], "resources": ["*"]},
                {"verbs": ["*"], "apiGroups": [""], "resources": ["nodes"], "clusterScope": True},
            ],
        },
    ),
    _fs(
        "bob-everything",
        "fast",
        700,
        {
            "subjects": [{"kind": "User", "user": {"name": "bob"}}],
            "resourceRules": [
                {"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"], "namespaces": ["t"]}
            ],
            "nonResourceRules": [{"verbs": ["get"], "nonResourceURLs": ["/healthz/*"]}],
        },
    ),
    _fs("dangling", "missing", 1, {"subjects": [{"kind": "Group", "group": {"name": "*"}}]}),
]


@pytest.mark.parametrize(
    ("attrs", "schema"),
    [
        (_attrs(BOB, "create", "pods", "t"), "bob-everything"),  # 700 before 800
        (_attrs(BOB, "create", "pods", "u"), "global-default"),  # not in its namespaces
        (_attrs(BOB, "get", "healthz", path="/healthz/etcd"), "bob-everything"),
        (_attrs(BOB, "get", "healthz", path="/healthz"), "global-default"),
        (_attrs(SA, "list", "pods", "u"), "service-accounts"),  # reads-in-t: no namespaces
        (_attrs(SA, "patch", "nodes"), "reads-in-t"),  # clusterScope
        (_attrs(SA, "create", "pods", "t"), "service-accounts"),
    ],
)
def test_flow_schema_matching_in_precedence_order(attrs: Attributes, schema: str) -> None:
    flow = default_flow_control()
    levels = [level_of(_plc("slow", 10), 0.25), level_of(_plc("fast", 50), 0.25)]
    flow.reconfigure(levels, [schema_of(s) for s in SCHEMAS])
    assert flow.classify(attrs.user, attrs)[0].name == schema


def test_shares_divide_the_server_budget() -> None:
    flow = default_flow_control(FLOW)
    assert flow.budget("workload-low", True).burst == pytest.approx(10)
    assert flow.budget("node-high", True).rate == pytest.approx(0.02 * 40 / 160)
    flow.reconfigure([level_of(_plc("binds", 40), 0.25)], [schema_of(BINDS)])
    assert flow.budget("binds", True).burst == pytest.approx(3.2)
    assert flow.budget("workload-low", True).burst == pytest.approx(8)
    assert flow.budget("binds", False).rate == 0  # no read budget given: unlimited
    assert json.dumps(flow.levels["binds"].max_queue_wait_s) == "0.0"  # Reject: no queue
