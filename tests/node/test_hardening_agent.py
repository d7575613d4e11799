"""The node agent reports a node whose kubelet lacks the settings that contain a sandbox.

A real agent process against simcluster, given ``--kubelet-config``: a config without
``podPidsLimit`` and with an ``evictionHard`` that drops the inode threshold sets
``sandman_node_agent_nodes_unhardened{check}`` to 1 for exactly those checks and writes one
Warning Event ``NodeNotHardened`` on its Node naming them; once the operator fixes the file
the gauge falls to 0 on the next pass, and no new Event is written.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from daemon.node.agent import NODE_EVENTS_NAMESPACE
from daemon.node.hardening import CHECKS
from kube.light import LightClient
from kube.resources import EVENTS
from simcluster.embedded import EmbeddedCluster
from tests.support.agents import metric, run_agent
from tests.support.wait import wait_until_async

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(90)]
GAUGE = "sandman_node_agent_nodes_unhardened"
WEAK = {
    "kind": "KubeletConfiguration",
    "apiVersion": "kubelet.config.k8s.io/v1beta1",
    "evictionHard": {"memory.available": "100Mi", "nodefs.available": "10%"},
}
HARDENED = WEAK | {
    "podPidsLimit": 1024,
    "evictionHard": {"nodefs.available": "10%", "nodefs.inodesFree": "5%"},
}


async def _warnings(api: LightClient) -> list[dict]:
    events = (await api.list(EVENTS, NODE_EVENTS_NAMESPACE))["items"]
    return [e for e in events if e["reason"] == "NodeNotHardened"]


async def test_an_unhardened_node_is_reported_until_fixed(
    cluster: EmbeddedCluster, api: LightClient, tmp_path: Path
) -> None:
    config = tmp_path / "kubelet-config.json"
    config.write_text(json.dumps(WEAK))
    args = ("--kubelet-config", str(config), "--reconcile-interval-s", "0.2")
    with run_agent(cluster, "node-0", *args, workdir=tmp_path) as agent:

        async def reported() -> bool:
            return metric(agent.metrics(), GAUGE, check="pod_pids_limit") == 1

        await wait_until_async(reported, retry=(OSError,), what="the unhardened gauge")
        text = agent.metrics()
        failing = {c for c in CHECKS if metric(text, GAUGE, check=c) == 1}
        assert failing == {"pod_pids_limit", "eviction_nodefs_inodes"}
        (event,) = await wait_until_async(lambda: _warnings(api), what="the Event")
        assert event["type"] == "Warning"
        assert event["involvedObject"] == {"apiVersion": "v1", "kind": "Node", "name": "node-0"}
        assert "podPidsLimit" in event["message"] and "nodefs.inodesFree" in event["message"]

        config.write_text(json.dumps(HARDENED))

        async def fixed() -> bool:
            return metric(agent.metrics(), GAUGE) == 0

        await wait_until_async(fixed, what="the gauge back to 0")
        assert len(await _warnings(api)) == 1  # a fixed node writes no new Warning
