"""Node pools in profiles: the single-pool profiles plan the very nodes they did before pools
existed (golden file, rendered by the pre-pools code), a pooled profile parses strictly, and a
cluster started from pools registers each pool's shape with its share of other tenants."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, config

from simcluster.cluster import TENANT_IMAGE, ClusterSettings
from simcluster.embedded import EmbeddedCluster
from simcluster.pools import POOL_LABEL, PlannedNode
from simcluster.profile import ProfileError, load_profile, parse_profile
from simcluster.quantity import to_milli
from tests.support.wait import wait_until

GOLDEN = Path(__file__).parent / "golden" / "profile_nodes.json"


def _runs(plan: list[PlannedNode]) -> list[list[Any]]:
    """The plan as [count, node] runs (400 equal nodes are one run), in the golden's form."""
    runs: list[list[Any]] = []
    for p in plan:
        d = json.loads(json.dumps({**asdict(p.node), "foreign_fraction": p.foreign_fraction}))
        if runs and runs[-1][1] == d:
            runs[-1][0] += 1
        else:
            runs.append([1, d])
    return runs


@pytest.mark.parametrize("name", sorted(json.loads(GOLDEN.read_text())))
def test_single_pool_profiles_plan_the_nodes_they_did(name: str) -> None:
    before = json.loads(GOLDEN.read_text())[name]
    settings = load_profile(name)
    assert settings.pools == ()
    assert settings.nodes == before["nodes"]
    assert _runs(settings.node_plan()) == before["runs"]


def test_mixed_profile_has_three_pools() -> None:
    s = load_profile("mixed")
    pools = {p.name: p for p in s.node_pools()}
    assert list(pools) == ["general", "highmem", "busy"]
    assert s.nodes == 400 == sum(p.count for p in pools.values())
    assert pools["highmem"].node.memory == "256Gi"
    assert pools["highmem"].node.taints == (
        {"key": "dedicated", "value": "highmem", "effect": "NoSchedule"},
    )
    assert pools["general"].node.taints == ()
    assert (pools["busy"].node.cpu, pools["busy"].node.creation_rate) == ("8", 2.0)
    assert pools["general"].node.creation_rate == 4.5  # shared from nodes:
    plan = s.node_plan()
    assert [p.node.labels[POOL_LABEL] for p in plan[299:301]] == ["general", "highmem"]
    busy = [p.foreign_fraction for p in plan if p.pool == "busy"]
    assert all(0.35 <= f <= 0.65 for f in busy) and len(set(busy)) > 1
    assert 0.45 <= sum(busy) / len(busy) <= 0.55
    assert {p.foreign_fraction for p in plan if p.pool == "highmem"} == {0.2}
    assert all(TENANT_IMAGE in p.node.preloaded_images for p in plan)
    assert s.node_plan() == plan  # the seed decides the spread


def _pooled(**pools: Any) -> dict[str, Any]:
    return {"seed": 3, "nodes": {"cpu": "4", "labels": {"zone": "a"}}, "pools": pools}


def test_pool_keys_add_to_or_replace_the_shared_ones() -> None:
    data = _pooled(
        a={"count": 1, "labels": {"kind": "a"}, "preloaded_images": ["x:1"]},
        b={"count": 2, "cpu": "2", "taints": [{"key": "k", "effect": "NoExecute"}]},
    )
    data["nodes"].update(
        preloaded_images=["shared:1"], taints=[{"key": "s", "effect": "NoSchedule"}]
    )
    a, b = parse_profile(data).node_pools()
    assert dict(a.node.labels) == {"zone": "a", "kind": "a"}
    assert a.node.preloaded_images == ("shared:1", "x:1")
    assert a.node.taints == ({"key": "s", "effect": "NoSchedule"},)
    assert (b.node.cpu, b.node.taints) == ("2", ({"key": "k", "effect": "NoExecute"},))
    overridden = load_profile("mixed", {"pools.busy.count": "3", "pools.general.count": "1"})
    assert overridden.nodes == 1 + 60 + 3


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"nodes": {"count": 3}, "pools": {"a": {"count": 1}}}, "nodes.count does not apply"),
        (_pooled(a={"count": 1, "colour": "red"}), "pools.a: unknown key(s) colour"),
        (_pooled(a={"count": 1, "process_count": 1}), "pools.a: unknown key(s) process_count"),
        (_pooled(**{"not a label!": {"count": 1}}), "is not a label value"),
        (_pooled(a={"count": 1, "foreign_fraction": 1.0}), "foreign_fraction must be in"),
        (_pooled(a={"count": -1}), "count must be >= 0"),
        (_pooled(a=["count", 1]), "pools.a: must be a mapping"),
        ({"pools": []}, "pools must be a non-empty mapping"),
    ],
)
def test_bad_pools_are_profile_errors(data: dict[str, Any], message: str) -> None:
    with pytest.raises(ProfileError, match=message.replace("(", r"\(").replace(")", r"\)")):
        parse_profile(data)


SMALL = {
    "seed": 1,
    "nodes": {"cpu": "4", "memory": "8Gi", "start_latency_s": 0.01, "lease_interval_s": 0.5},
    "images": {"pull_base_s": 0.01, "pull_bandwidth": "1Gi"},
    "pools": {
        "general": {"count": 2},
        "tainted": {
            "count": 1,
            "memory": "32Gi",
            "labels": {"node-type": "highmem"},
            "taints": [{"key": "dedicated", "value": "highmem", "effect": "NoExecute"}],
        },
        "busy": {"count": 2, "foreign_fraction": 0.5, "foreign_spread": 0.2},
    },
}


def _phase(v1: client.CoreV1Api, name: str) -> str:
    return str(v1.read_namespaced_pod(name, "t").status.phase)


def _bound(name: str, node: str, **spec: Any) -> dict[str, Any]:
    container = {"name": "c", "image": "img:1", "resources": {"requests": {"cpu": "10m"}}}
    return {
        "metadata": {"name": name},
        "spec": {"nodeName": node, "containers": [container], **spec},
    }


def test_a_pooled_cluster_registers_each_pool(tmp_path: Path) -> None:
    settings: ClusterSettings = parse_profile(SMALL)
    with (
        EmbeddedCluster(settings) as cluster,
        config.new_client_from_config(config_file=str(cluster.kubeconfig)) as ac,
    ):
        v1 = client.CoreV1Api(ac)
        nodes = {n.metadata.name: n for n in v1.list_node().items}
        pools = {name: n.metadata.labels.get(POOL_LABEL) for name, n in nodes.items()}
        assert pools == {
            "node-0": "general", "node-1": "general", "node-2": "tainted",
            "node-3": "busy", "node-4": "busy",
        }  # fmt: skip
        tainted = nodes["node-2"]
        assert tainted.status.allocatable["memory"] == "32Gi"
        assert tainted.metadata.labels["node-type"] == "highmem"
        assert [(t.key, t.effect) for t in tainted.spec.taints] == [("dedicated", "NoExecute")]
        assert nodes["node-0"].spec.taints is None
        tenants = v1.list_namespaced_pod("simcluster-tenants").items
        held = {p.spec.node_name: p.spec.containers[0].resources.requests["cpu"] for p in tenants}
        assert set(held) == {"node-3", "node-4"}  # only the busy pool has other tenants
        for node, cpu in held.items():
            share = to_milli(cpu) / 4000  # in whole millicores
            assert abs(share - cluster.cluster.foreign[node]) < 1 / 4000
            assert 0.3 <= share <= 0.7
        wait_until(
            lambda: (
                {p.status.phase for p in v1.list_namespaced_pod("simcluster-tenants").items}
                == {"Running"}
            )
        )
        # The kubelet admits as upstream's does: only NoExecute taints are checked there
        # (NoSchedule is the scheduler's business, nodeName bypasses it).
        v1.create_namespace({"metadata": {"name": "t"}})
        v1.create_namespaced_pod("t", _bound("intruder", "node-2"))
        toleration = {"key": "dedicated", "operator": "Equal", "value": "highmem"}
        v1.create_namespaced_pod("t", _bound("guest", "node-2", tolerations=[toleration]))
        wait_until(lambda: _phase(v1, "intruder") == "Failed" and _phase(v1, "guest") == "Running")
        assert v1.read_namespaced_pod("intruder", "t").status.reason == "TaintToleration"
        cluster.call(lambda: cluster.cluster.add_nodes(1))  # type: ignore[union-attr]
        added = v1.read_node("node-5")  # one more of the last pool, without other tenants
        assert added.metadata.labels[POOL_LABEL] == "busy" and "node-5" not in held
        assert len(v1.list_namespaced_pod("simcluster-tenants").items) == 2
