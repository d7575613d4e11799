"""Process runtime: the pod's command really runs (under bubblewrap where installed),
listening on its own loopback pod IP; the readiness probe is a real HTTP GET; deleting the
pod stops the process within the grace period."""

from __future__ import annotations

import shutil
import sys
import time
from pathlib import Path

import httpx
from kubernetes import client, config

from simcluster.cluster import ClusterSettings
from simcluster.embedded import EmbeddedCluster
from simcluster.kubelet.kubelet import NodeSettings
from simcluster.kubelet.process import ProcessRuntime


def web_pod(name: str) -> dict:
    return {
        "metadata": {"name": name},
        "spec": {
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 5,
            "containers": [
                {
                    "name": "web",
                    "image": "python:3.11",
                    "command": [sys.executable, "-m", "http.server", "--bind", "$(POD_IP)", "8080"],
                    "env": [
                        {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}
                    ],
                    "ports": [{"name": "http", "containerPort": 8080}],
                    "readinessProbe": {
                        "httpGet": {"path": "/", "port": "http"},
                        "periodSeconds": 1,
                    },
                }
            ],
        },
    }


def test_process_pod_serves_on_its_pod_ip(tmp_path: Path) -> None:
    settings = ClusterSettings(
        nodes=1, runtime="process", node=NodeSettings(preloaded_images=("python:3.11",))
    )
    with (
        EmbeddedCluster(settings, workdir=tmp_path) as cluster,
        config.new_client_from_config(config_file=str(cluster.kubeconfig)) as ac,
    ):
        assert cluster.cluster is not None
        runtime = cluster.cluster.runtime
        assert isinstance(runtime, ProcessRuntime)
        assert runtime.sandboxed == (shutil.which("bwrap") is not None)
        v1 = client.CoreV1Api(ac)
        v1.create_namespace({"metadata": {"name": "t"}})
        v1.create_namespaced_pod("t", web_pod("web"))
        body = {"metadata": {"name": "web"}, "target": {"kind": "Node", "name": "node-0"}}
        v1.create_namespaced_pod_binding("web", "t", body, _preload_content=False).release_conn()
        deadline = time.monotonic() + 20
        while True:
            pod = v1.read_namespaced_pod("web", "t")
            ready = {c.type: c.status for c in pod.status.conditions or []}.get("Ready")
            if ready == "True":
                break
            assert time.monotonic() < deadline, f"pod never became Ready: {pod.status}"
            time.sleep(0.1)
        ip = pod.status.pod_ip
        assert ip.startswith("127.1.0.")
        r = httpx.get(f"http://{ip}:8080/")
        assert r.status_code == 200
        log = tmp_path / "logs" / "t_web_web.log"
        assert "GET / HTTP/1.1" in log.read_text()  # the probe's and our request
        t0 = time.monotonic()
        v1.delete_namespaced_pod("web", "t")
        while v1.list_namespaced_pod("t").items:
            assert time.monotonic() - t0 < 10
            time.sleep(0.1)
        try:
            httpx.get(f"http://{ip}:8080/", timeout=1)
            raise AssertionError("the pod's process still answers after deletion")
        except httpx.ConnectError:
            pass
