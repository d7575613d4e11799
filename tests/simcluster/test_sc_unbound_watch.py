"""A watch pinned to ``spec.nodeName=`` (what kube-scheduler and Sandman's binder use for
pending pods) sees unbound pods arrive, and sees them leave when they are bound."""

from __future__ import annotations

import threading

from kubernetes import client, config, watch

from simcluster.embedded import EmbeddedCluster


def test_watch_on_empty_node_name_sees_unbound_pods(cluster: EmbeddedCluster) -> None:
    with config.new_client_from_config(config_file=str(cluster.kubeconfig)) as api:
        v1 = client.CoreV1Api(api)
        v1.create_namespace({"metadata": {"name": "w"}})
        rv = v1.list_namespaced_pod("w").metadata.resource_version
        seen: list[tuple[str, str]] = []
        w = watch.Watch()

        def run() -> None:
            for event in w.stream(
                v1.list_namespaced_pod,
                "w",
                field_selector="spec.nodeName=",
                resource_version=rv,
                timeout_seconds=10,
            ):
                seen.append((event["type"], event["object"].metadata.name))
                if len(seen) == 2:
                    w.stop()

        reader = threading.Thread(target=run)
        reader.start()
        pod = {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "x"}]}}
        v1.create_namespaced_pod("w", pod)
        body = {"metadata": {"name": "p"}, "target": {"kind": "Node", "name": "node-0"}}
        v1.create_namespaced_pod_binding("p", "w", body, _preload_content=False).release_conn()
        reader.join(15)
        assert seen == [("ADDED", "p"), ("DELETED", "p")]
