"""A virtual cluster with a few process nodes (``nodes.process_count``): the first nodes run
pods as real processes and carry (label and NoSchedule taint) ``simcluster.io/runtime=process``,
the rest stay virtual —
so a soak on hundreds of nodes can still send tool calls to a few real sandbox daemons."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from kubernetes import client, config

from devstack.sandbox_python import host_interpreter
from simcluster.cluster import RUNTIME_LABEL, ClusterSettings
from simcluster.embedded import EmbeddedCluster
from simcluster.kubelet.settings import NodeSettings
from simcluster.profile import ProfileError, load_profile
from tests.support.wait import wait_until

IMAGE = "python:3.11"
#: The host's Python as a pod sees it (the pod's root holds /usr, not this virtualenv).
PYTHON = host_interpreter()
SERVE = [PYTHON.executable, "-m", "http.server", "--bind"]


def _server_pod(name: str, node: str) -> dict:
    return {
        "metadata": {"name": name},
        "spec": {
            "nodeName": node,
            "restartPolicy": "Never",
            "containers": [
                {
                    "name": "web",
                    "image": IMAGE,
                    "command": [*SERVE, "$(POD_IP)", "8080"],
                    "env": [
                        {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}
                    ],
                    "readinessProbe": {"httpGet": {"path": "/", "port": 8080}, "periodSeconds": 1},
                }
            ],
        },
    }


def test_the_first_nodes_run_processes_the_rest_stay_virtual(tmp_path: Path) -> None:
    settings = ClusterSettings(
        nodes=3,
        process_nodes=1,
        node=NodeSettings(preloaded_images=(IMAGE,)),
        process_binds=PYTHON.binds,
    )
    with (
        EmbeddedCluster(settings, workdir=tmp_path) as cluster,
        config.new_client_from_config(config_file=str(cluster.kubeconfig)) as ac,
    ):
        v1 = client.CoreV1Api(ac)
        labels = {n.metadata.name: n.metadata.labels or {} for n in v1.list_node().items}
        assert labels["node-0"].get(RUNTIME_LABEL) == "process"
        assert RUNTIME_LABEL not in labels["node-1"] and RUNTIME_LABEL not in labels["node-2"]
        taints = {n.metadata.name: n.spec.taints or [] for n in v1.list_node().items}
        assert [(t.key, t.value, t.effect) for t in taints["node-0"]] == [
            (RUNTIME_LABEL, "process", "NoSchedule")  # only pods that ask for it land there
        ]
        assert not taints["node-1"]
        v1.create_namespace({"metadata": {"name": "t"}})
        v1.create_namespaced_pod("t", _server_pod("real", "node-0"))
        v1.create_namespaced_pod("t", _server_pod("virtual", "node-1"))

        def ready() -> dict[str, str]:
            pods = {p.metadata.name: p for p in v1.list_namespaced_pod("t").items}
            conditions = {
                name: {c.type: c.status for c in p.status.conditions or []}.get("Ready")
                for name, p in pods.items()
            }
            assert conditions == {"real": "True", "virtual": "True"}, conditions
            return {name: p.status.pod_ip for name, p in pods.items()}

        ips = wait_until(ready, timeout_s=20, interval_s=0.1)
        assert httpx.get(f"http://{ips['real']}:8080/", timeout=5).status_code == 200
        assert (tmp_path / "logs" / "t_real_web.log").exists()
        assert not (tmp_path / "logs" / "t_virtual_web.log").exists()  # nothing ran


def test_the_profile_key_sets_the_process_nodes() -> None:
    assert load_profile("paper-burst", {"nodes.process_count": "2"}).process_nodes == 2
    assert load_profile("paper-burst").process_nodes == 0


def test_the_profile_key_sets_the_process_binds() -> None:
    binds = load_profile("dev", {"process.binds": '{"/opt/py": "/srv/py"}'}).process_binds
    assert binds == (("/opt/py", "/srv/py"),)
    assert load_profile("dev").process_binds == ()
    with pytest.raises(ProfileError, match="both must be absolute"):
        load_profile("dev", {"process.binds": '{"opt/py": "/srv/py"}'})
    with pytest.raises(ProfileError, match="must map"):
        load_profile("dev", {"process.binds": "[/srv/py]"})
