"""Conformance through the official ``kubernetes`` Python client (urllib3, typed models):
CRUD, typed deserialisation of every object, watch with bookmarks and 410, patch flavours,
bindings, quota Forbidden, leases."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from kubernetes import client, config, watch
from kubernetes.client.rest import ApiException

from simcluster.apiserver import ServerSettings
from simcluster.embedded import EmbeddedCluster


def connect(cluster: EmbeddedCluster) -> client.ApiClient:
    return config.new_client_from_config(config_file=str(cluster.kubeconfig))


@pytest.fixture
def core(cluster: EmbeddedCluster) -> Iterator[client.CoreV1Api]:
    with connect(cluster) as api_client:
        v1 = client.CoreV1Api(api_client)
        v1.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name="t")))
        yield v1


def pod(name: str, **labels: str) -> client.V1Pod:
    return client.V1Pod(
        metadata=client.V1ObjectMeta(name=name, labels=labels or None),
        spec=client.V1PodSpec(
            containers=[
                client.V1Container(
                    name="c",
                    image="img:1",
                    resources=client.V1ResourceRequirements(
                        requests={"cpu": "250m", "memory": "512Mi"}
                    ),
                )
            ],
            scheduler_name="sandman",
        ),
    )


def test_typed_crud_and_defaults(core: client.CoreV1Api) -> None:
    created = core.create_namespaced_pod("t", pod("a", app="x"))
    assert created.metadata.uid
    assert created.status.phase == "Pending"
    assert created.status.qos_class == "Burstable"
    assert created.spec.restart_policy == "Always"
    assert created.spec.service_account_name == "default"
    assert created.spec.containers[0].image_pull_policy == "IfNotPresent"
    listed = core.list_namespaced_pod("t", label_selector="app=x")
    assert [p.metadata.name for p in listed.items] == ["a"]
    assert int(listed.metadata.resource_version) >= int(created.metadata.resource_version)
    with pytest.raises(ApiException) as err:
        core.read_namespaced_pod("missing", "t")
    assert err.value.status == 404
    assert json.loads(err.value.body)["reason"] == "NotFound"
    with pytest.raises(ApiException) as err:
        core.create_namespaced_pod("nope", pod("b"))
    assert err.value.status == 404
    assert json.loads(err.value.body)["message"] == 'namespaces "nope" not found'
    bad = pod("Bad_Name")
    with pytest.raises(ApiException) as err:
        core.create_namespaced_pod("t", bad)
    assert err.value.status == 422
    assert json.loads(err.value.body)["details"]["causes"][0]["field"] == "metadata.name"


def test_patch_flavours(core: client.CoreV1Api) -> None:
    core.create_namespaced_pod("t", pod("p"))
    # dict body: the client sends a strategic merge patch
    patched = core.patch_namespaced_pod("p", "t", {"metadata": {"labels": {"a": "1"}}})
    assert patched.metadata.labels == {"a": "1"}
    # list body: JSON patch
    patched = core.patch_namespaced_pod(
        "p", "t", [{"op": "add", "path": "/metadata/labels/b", "value": "2"}]
    )
    assert patched.metadata.labels == {"a": "1", "b": "2"}
    # status subresource only changes status
    status = core.patch_namespaced_pod_status(
        "p",
        "t",
        {"status": {"phase": "Running", "podIP": "10.0.0.9"}, "metadata": {"labels": {"z": "1"}}},
    )
    assert status.status.phase == "Running"
    assert "z" not in status.metadata.labels
    running = core.list_namespaced_pod(
        "t", field_selector="status.phase=Running,status.podIP=10.0.0.9"
    )
    assert len(running.items) == 1


def test_watch_bookmarks_timeout_and_410() -> None:
    with (
        EmbeddedCluster(ServerSettings(history=8, bookmark_interval_s=0.2)) as cluster,
        connect(cluster) as ac,
    ):
        v1 = client.CoreV1Api(ac)
        v1.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name="t")))
        rv = v1.create_namespaced_pod("t", pod("w")).metadata.resource_version
        v1.patch_namespaced_pod("w", "t", {"metadata": {"labels": {"k": "v"}}})
        w = watch.Watch()
        events = []
        for ev in w.stream(
            v1.list_namespaced_pod,
            "t",
            resource_version=rv,
            allow_watch_bookmarks=True,
            timeout_seconds=3,  # as upstream, no bookmark is due within 2 s of the timeout
        ):
            events.append(ev["type"])
        assert events[0] == "MODIFIED"
        assert "BOOKMARK" in events
        for i in range(10):
            v1.patch_namespaced_pod("w", "t", {"metadata": {"labels": {"k": str(i)}}})
        with pytest.raises(ApiException) as err:
            for _ in watch.Watch().stream(
                v1.list_namespaced_pod, "t", resource_version=rv, timeout_seconds=2
            ):
                pass
        assert err.value.status == 410


def test_binding_quota_and_leases(core: client.CoreV1Api, cluster: EmbeddedCluster) -> None:
    core.create_namespaced_resource_quota(
        "t",
        client.V1ResourceQuota(
            metadata=client.V1ObjectMeta(name="q"),
            spec=client.V1ResourceQuotaSpec(hard={"requests.cpu": "500m"}),
        ),
    )
    core.create_namespaced_pod("t", pod("a"))
    core.create_namespaced_pod("t", pod("b"))
    with pytest.raises(ApiException) as err:
        core.create_namespaced_pod("t", pod("c"))
    body = json.loads(err.value.body)
    assert err.value.status == 403
    assert body["reason"] == "Forbidden"
    assert body["message"] == (
        'pods "c" is forbidden: exceeded quota: q, requested: requests.cpu=250m, '
        "used: requests.cpu=500m, limited: requests.cpu=500m"
    )
    binding = client.V1Binding(
        metadata=client.V1ObjectMeta(name="a"),
        target=client.V1ObjectReference(kind="Node", name="n1"),
    )
    resp = core.create_namespaced_pod_binding("a", "t", binding, _preload_content=False)
    assert resp.status == 201
    assert json.loads(resp.data)["status"] == "Success"
    resp.release_conn()
    with pytest.raises(ApiException) as err:
        core.create_namespaced_binding("t", binding, _preload_content=False)
    assert err.value.status == 409
    assert core.read_namespaced_pod("a", "t").spec.node_name == "n1"
    with connect(cluster) as ac:
        coord = client.CoordinationV1Api(ac)
        lease = client.V1Lease(
            metadata=client.V1ObjectMeta(name="leader"),
            spec=client.V1LeaseSpec(holder_identity="me", lease_duration_seconds=15),
        )
        made = coord.create_namespaced_lease("t", lease)
        made.spec.holder_identity = "you"
        coord.replace_namespaced_lease("leader", "t", made)
        made.spec.holder_identity = "stale-writer"
        with pytest.raises(ApiException) as err:
            coord.replace_namespaced_lease("leader", "t", made)  # stale resourceVersion
        assert err.value.status == 409
        assert coord.read_namespaced_lease("leader", "t").spec.holder_identity == "you"
