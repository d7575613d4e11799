"""Pure pieces: selectors, patches, quantities, path parsing."""

from __future__ import annotations

import pytest

from simcluster.apiserver.dispatch import parse_path
from simcluster.apiserver.patch import json_patch, merge_patch, strategic_merge_patch
from simcluster.apiserver.selectors import FieldSelector, LabelSelector
from simcluster.errors import BadRequest, Invalid
from simcluster.kubelet.admission import Capacity, admit
from simcluster.quantity import format_cpu, format_memory, to_milli, to_units


@pytest.mark.parametrize(
    ("selector", "labels", "expected"),
    [
        ("a=1", {"a": "1"}, True),
        ("a==1", {"a": "2"}, False),
        ("a!=1", {}, True),
        ("a in (1, 2),b", {"a": "2", "b": ""}, True),
        ("a notin (1)", {"a": "1"}, False),
        ("!a", {"b": "1"}, True),
        ("a", {}, False),
        ("sandman.io/sandbox=yes", {"sandman.io/sandbox": "yes"}, True),
    ],
)
def test_label_selector(selector: str, labels: dict[str, str], expected: bool) -> None:
    assert LabelSelector.parse(selector).matches(labels) is expected


def test_field_selector() -> None:
    allowed = frozenset({"metadata.name", "spec.nodeName", "status.phase"})
    sel = FieldSelector.parse("spec.nodeName=n1,status.phase!=Failed", allowed)
    assert sel.matches({"spec": {"nodeName": "n1"}, "status": {"phase": "Running"}})
    assert not sel.matches({"spec": {"nodeName": "n1"}, "status": {"phase": "Failed"}})
    assert FieldSelector.parse("spec.nodeName=", allowed).matches({"spec": {}})
    with pytest.raises(BadRequest, match=r"field label not supported: spec\.x"):
        FieldSelector.parse("spec.x=1", allowed)


def test_merge_and_json_patch() -> None:
    assert merge_patch({"a": {"b": 1, "c": 2}}, {"a": {"b": None, "d": 3}}) == {
        "a": {"c": 2, "d": 3}
    }
    doc = {"l": [1, 2], "m": {"x": 1}}
    out = json_patch(
        doc, [{"op": "add", "path": "/l/-", "value": 3}, {"op": "remove", "path": "/m/x"}]
    )
    assert out == {"l": [1, 2, 3], "m": {}}
    assert doc == {"l": [1, 2], "m": {"x": 1}}
    with pytest.raises(Invalid):
        json_patch(doc, [{"op": "test", "path": "/l/0", "value": 9}])


def test_strategic_merge_patch_lists_and_directives() -> None:
    spec = {
        "containers": [
            {"name": "a", "image": "1", "env": [{"name": "X", "value": "1"}]},
            {"name": "b", "image": "1"},
        ],
        "tolerations": [{"key": "t"}],
    }
    patch = {
        "containers": [
            {"name": "a", "env": [{"name": "Y", "value": "2"}]},
            {"name": "b", "$patch": "delete"},
        ],
        "$setElementOrder/containers": [{"name": "a"}],
        "tolerations": [{"key": "u"}],
    }
    out = strategic_merge_patch(spec, patch)
    assert out["containers"] == [
        {
            "name": "a",
            "image": "1",
            "env": [{"name": "X", "value": "1"}, {"name": "Y", "value": "2"}],
        }
    ]
    assert out["tolerations"] == [{"key": "u"}]  # no merge key upstream: replaced
    meta = strategic_merge_patch(
        {"finalizers": ["a", "b"]},
        {"$deleteFromPrimitiveList/finalizers": ["a"], "finalizers": ["c"]},
    )
    assert meta == {"finalizers": ["b", "c"]}
    assert strategic_merge_patch(
        {"s": {"x": 1, "y": 2}}, {"s": {"$retainKeys": ["y"], "y": 3}}
    ) == {"s": {"y": 3}}


def test_quantities() -> None:
    assert to_milli("250m") == 250
    assert to_milli("1.5") == 1500
    assert to_units("512Mi") == 512 * 2**20
    assert to_units("1e3") == 1000
    assert to_units("1k") == 1000
    assert format_cpu(16000) == "16"
    assert format_cpu(250) == "250m"
    assert format_memory(64 * 2**30) == "64Gi"


def test_parse_path() -> None:
    info = parse_path("POST", "/api/v1/namespaces/t/pods/p/binding", {})
    assert info is not None
    assert (info.verb, info.resource, info.namespace, info.name, info.subresource) == (
        "create", "pods", "t", "p", "binding",
    )  # fmt: skip
    ns = parse_path("PUT", "/api/v1/namespaces/t/finalize", {})
    assert ns is not None
    assert (ns.resource, ns.name, ns.subresource, ns.namespace) == (
        "namespaces",
        "t",
        "finalize",
        None,
    )
    watch = parse_path("GET", "/apis/coordination.k8s.io/v1/namespaces/x/leases", {"watch": "1"})
    assert watch is not None
    assert (watch.verb, watch.group, watch.resource) == ("watch", "coordination.k8s.io", "leases")


def test_kubelet_admission_rules() -> None:
    cap = Capacity(pods=3, cpu_milli=1000, memory=2**30)
    labels = {"kubernetes.io/hostname": "n0", "disk": "ssd", "gen": "5"}
    ok = admit({}, (100, 2**20), (0, 0, 0), cap, labels, [])
    assert ok is None
    assert admit({}, (100, 0), (3, 0, 0), cap, labels, []) == (
        "OutOfpods",
        "Pod was rejected: Node didn't have enough resource: pods, "
        "requested: 1, used: 3, capacity: 3",
    )
    assert admit({}, (0, 2**30), (0, 0, 1), cap, labels, [])[0] == "OutOfmemory"
    assert admit({"nodeSelector": {"disk": "hdd"}}, (0, 0), (0, 0, 0), cap, labels, []) == (
        "NodeAffinity",
        "Pod was rejected: Predicate NodeAffinity failed",
    )
    affinity = {
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {"matchExpressions": [{"key": "gen", "operator": "Gt", "values": ["6"]}]},
                        {
                            "matchExpressions": [
                                {"key": "disk", "operator": "In", "values": ["ssd"]}
                            ]
                        },
                    ]
                }
            }
        }
    }
    assert admit(affinity, (0, 0), (0, 0, 0), cap, labels, []) is None  # second term matches
    taint = {"key": "dedicated", "value": "x", "effect": "NoExecute"}
    assert admit({}, (0, 0), (0, 0, 0), cap, labels, [taint])[0] == "TaintToleration"
    tolerated = {"tolerations": [{"key": "dedicated", "operator": "Equal", "value": "x"}]}
    assert admit(tolerated, (0, 0), (0, 0, 0), cap, labels, [taint]) is None
    no_schedule = {"key": "k", "effect": "NoSchedule"}
    assert admit({}, (0, 0), (0, 0, 0), cap, labels, [no_schedule]) is None  # kubelet ignores it


def test_pod_networks_do_not_collide_between_clusters() -> None:
    from simcluster.network import PodNetwork

    first, second = PodNetwork(10), PodNetwork(400)
    try:
        a = first.reserve()
        b = second.reserve()
        assert a != b and not (b <= a < b + second.span)  # disjoint second octets
        first.release()
        again = PodNetwork(10)
        assert again.reserve() == a  # released ranges are reused
        again.release()
    finally:
        first.release()
        second.release()


def test_a_small_pod_network_never_lands_inside_a_big_ones_range() -> None:
    """A 400-node cluster spans two second octets, and both are its: a one-octet cluster
    reserved after it takes neither (only the first was locked once)."""
    from simcluster.network import PodNetwork

    big, small = PodNetwork(400), PodNetwork(1)
    try:
        b = big.reserve()
        s = small.reserve()
        assert s not in range(b, b + big.span)
        assert len(big.lock_fds) == big.span == 2
    finally:
        big.release()
        small.release()
