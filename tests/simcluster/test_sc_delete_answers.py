"""What a DELETE answers, through the official client's typed ``delete_*`` methods.

The client is generated from upstream's OpenAPI, which declares the deleted object as a
delete's answer for the kinds whose registry returns it (``V1Service``, ``V1PodTemplate``...)
and a bare ``object`` (a Status) for the others. So each kind resources.yaml serves is
created and deleted with its typed method, and the answer must decode as that method
declares and be shaped as the kind's ``deleteAnswer`` column says: the two sides of one
contract. Dry runs, objects held by finalizers, deletecollection and custom resources are
checked beside it.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from kubernetes import client, config
from pydantic import BaseModel

from simcluster.apiserver.resources import CREATE_ONLY, Registry, ResourceType
from simcluster.embedded import EmbeddedCluster
from tests.support.kubectl import admin_http

Obj = dict[str, Any]

#: the fields a kind needs beyond metadata to pass simcluster's validation (as upstream's)
_ROLE_REF = {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "view"}
REQUIRED: dict[str, Obj] = {
    "pods": {"spec": {"containers": [{"name": "c", "image": "img:1"}]}},
    "rolebindings": {"roleRef": _ROLE_REF},
    "clusterrolebindings": {"roleRef": _ROLE_REF},
    "flowschemas": {"spec": {"priorityLevelConfiguration": {"name": "global-default"}}},
    "prioritylevelconfigurations": {"spec": {"type": "Limited", "limited": {}}},
    # required by upstream's schema (and so by the typed models), not checked by simcluster
    "apiservices": {
        "spec": {
            "group": "example.com",
            "version": "v1",
            "groupPriorityMinimum": 1,
            "versionPriority": 1,
        }
    },
    "csidrivers": {"spec": {"attachRequired": True}},
    "csinodes": {"spec": {"drivers": []}},
    "storageclasses": {"provisioner": "example.com/disk"},
    "volumeattachments": {
        "spec": {
            "attacher": "example.com/disk",
            "nodeName": "n1",
            "source": {"persistentVolumeName": "pv"},
        }
    },
}
SERVED = [
    rt
    for rt in Registry.builtin().types.values()
    if rt.plural not in CREATE_ONLY and rt.plural != "customresourcedefinitions"
]


def _path(rt: ResourceType, name: str = "") -> str:
    base = f"/api/{rt.version}" if not rt.group else f"/apis/{rt.group}/{rt.version}"
    scope = "/namespaces/default" if rt.namespaced else ""
    return f"{base}{scope}/{rt.plural}" + (f"/{name}" if name else "")


def typed_delete(api_client: client.ApiClient, rt: ResourceType) -> Any:
    """The official client's ``delete_*`` method for ``rt`` (``CoreV1Api.delete_namespaced_
    service``, ``StorageV1Api.delete_csi_driver``...)."""
    words = rt.group.removesuffix(".k8s.io").split(".") if rt.group else ["core"]
    api = getattr(client, "".join(w.capitalize() for w in words) + rt.version.capitalize() + "Api")
    snake = re.sub(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", "_", rt.kind).lower()
    method = f"delete_{'namespaced_' if rt.namespaced else ''}{snake}"
    return getattr(api(api_client), method)


@pytest.fixture(scope="module")
def cluster() -> Iterator[EmbeddedCluster]:
    with EmbeddedCluster() as c:
        yield c


@pytest.fixture(scope="module")
def http(cluster: EmbeddedCluster) -> Iterator[httpx.Client]:
    with admin_http(cluster.kubeconfig) as c:
        yield c


@pytest.fixture(scope="module")
def api_client(cluster: EmbeddedCluster) -> Iterator[client.ApiClient]:
    with config.new_client_from_config(config_file=str(cluster.kubeconfig)) as c:
        yield c


def create(http: httpx.Client, rt: ResourceType, name: str, **meta: Any) -> Obj:
    body = {"apiVersion": rt.api_version, "kind": rt.kind, "metadata": {"name": name, **meta}}
    r = http.post(_path(rt), json={**body, **REQUIRED.get(rt.plural, {})})
    assert r.status_code == 201, r.text
    return r.json()


def _delete_call(api_client: client.ApiClient, rt: ResourceType, name: str, **kw: Any) -> Any:
    method = typed_delete(api_client, rt)
    return method(name, "default", **kw) if rt.namespaced else method(name, **kw)


def _status(rt: ResourceType, created: Obj) -> Obj:
    details = {"name": created["metadata"]["name"]}
    details |= {"group": rt.group} if rt.group else {}
    details |= {"kind": rt.plural, "uid": created["metadata"]["uid"]}
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Success",
        "details": details,
    }


@pytest.mark.parametrize("rt", SERVED, ids=lambda rt: f"{rt.group or 'core'}-{rt.plural}")
def test_typed_delete_decodes_for_every_kind(
    http: httpx.Client, api_client: client.ApiClient, rt: ResourceType
) -> None:
    name = "v1.example.com" if rt.plural == "apiservices" else f"del-{rt.plural}"  # version.group
    created = create(http, rt, name)
    declared = inspect.signature(typed_delete(api_client, rt)).return_annotation
    answer = _delete_call(api_client, rt, name)
    if declared is not object:  # upstream answers this kind's object: so must the column
        assert rt.delete_answer == "object"
        assert isinstance(answer, BaseModel) and type(answer) is declared
        assert (answer.kind, answer.metadata.name) == (rt.kind, name)
        assert answer.metadata.uid == created["metadata"]["uid"]
    elif rt.delete_answer == "status":
        assert answer == _status(rt, created)
    else:  # answered as it is marked for deletion (a namespace starts terminating)
        assert (answer["kind"], answer["metadata"]["name"]) == (rt.kind, name)
        assert answer["metadata"]["deletionTimestamp"]


def _kind(http: httpx.Client, plural: str, group: str = "", version: str = "v1") -> ResourceType:
    rt = Registry.builtin().get(group, version, plural)
    assert rt is not None
    return rt


def test_dry_run_answers_what_a_delete_would_and_keeps_the_object(
    http: httpx.Client, api_client: client.ApiClient
) -> None:
    cm, svc = _kind(http, "configmaps"), _kind(http, "services")
    created = create(http, cm, "dry-cm")
    assert _delete_call(api_client, cm, "dry-cm", dry_run="All") == _status(cm, created)
    answer = _delete_call(api_client, svc, create(http, svc, "dry-svc")["metadata"]["name"],
                          dry_run="All")  # fmt: skip
    assert answer.metadata.name == "dry-svc" and answer.metadata.deletion_timestamp is None
    held = create(http, cm, "dry-held", finalizers=["example.com/hold"])
    marked = _delete_call(api_client, cm, "dry-held", dry_run="All")
    assert marked["metadata"]["deletionTimestamp"]
    assert marked["metadata"]["resourceVersion"] == held["metadata"]["resourceVersion"]
    for path in ("configmaps/dry-cm", "services/dry-svc", "configmaps/dry-held"):
        stored = http.get(f"/api/v1/namespaces/default/{path}").json()
        assert "deletionTimestamp" not in stored["metadata"]


def test_an_object_held_by_a_finalizer_is_answered_itself(
    http: httpx.Client, api_client: client.ApiClient
) -> None:
    cm = _kind(http, "configmaps")
    create(http, cm, "held", finalizers=["example.com/hold"])
    answer = _delete_call(api_client, cm, "held")
    assert answer["kind"] == "ConfigMap" and answer["metadata"]["deletionTimestamp"]
    stored = http.get("/api/v1/namespaces/default/configmaps/held").json()
    assert stored["metadata"]["deletionTimestamp"] == answer["metadata"]["deletionTimestamp"]
    # legacy cascading deletion on an object left terminating: 202 Accepted, as upstream
    create(http, cm, "held-202", finalizers=["example.com/hold"])
    r = http.request(
        "DELETE",
        "/api/v1/namespaces/default/configmaps/held-202",
        json={"orphanDependents": False},
    )
    assert r.status_code == 202 and r.json()["metadata"]["deletionTimestamp"]


def test_deletecollection_answers_the_items_as_listed(http: httpx.Client) -> None:
    cm = _kind(http, "configmaps")
    gone = create(http, cm, "coll-a", labels={"coll": "x"})
    held = create(http, cm, "coll-b", labels={"coll": "x"}, finalizers=["example.com/hold"])
    r = http.delete("/api/v1/namespaces/default/configmaps", params={"labelSelector": "coll=x"})
    assert r.status_code == 200
    listed = r.json()
    assert listed["kind"] == "ConfigMapList"
    # as they were listed, not as deleting left them (coll-b is now terminating)
    assert [i["metadata"] for i in listed["items"]] == [gone["metadata"], held["metadata"]]
    remaining = http.get(
        "/api/v1/namespaces/default/configmaps", params={"labelSelector": "coll=x"}
    )
    assert [o["metadata"]["name"] for o in remaining.json()["items"]] == ["coll-b"]


def test_custom_resources_answer_a_status_and_a_crd_its_marked_self(
    http: httpx.Client, api_client: client.ApiClient
) -> None:
    crd = {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.com"},
        "spec": {
            "group": "example.com",
            "scope": "Namespaced",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "schema": {"openAPIV3Schema": {"type": "object",
                                                   "x-kubernetes-preserve-unknown-fields": True}},
                }
            ],
        },
    }  # fmt: skip
    assert http.post("/apis/apiextensions.k8s.io/v1/customresourcedefinitions", json=crd).is_success
    cr = http.post(
        "/apis/example.com/v1/namespaces/default/widgets",
        json={"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}},
    )
    assert cr.status_code == 201, cr.text
    custom = client.CustomObjectsApi(api_client)
    answer = custom.delete_namespaced_custom_object("example.com", "v1", "default", "widgets", "w")
    assert answer["details"] == {
        "name": "w",
        "group": "example.com",
        "kind": "widgets",
        "uid": cr.json()["metadata"]["uid"],
    }
    ext = client.ApiextensionsV1Api(api_client)
    marked = ext.delete_custom_resource_definition("widgets.example.com")
    assert marked["metadata"]["deletionTimestamp"]
    assert marked["metadata"]["finalizers"] == ["customresourcecleanup.apiextensions.k8s.io"]
    terminating = [c for c in marked["status"]["conditions"] if c["type"] == "Terminating"]
    assert [c["reason"] for c in terminating] == ["InstanceDeletionPending"]
    gone = http.get("/apis/apiextensions.k8s.io/v1/customresourcedefinitions/widgets.example.com")
    assert gone.status_code == 404


def test_a_resources_row_without_a_known_delete_answer_is_refused() -> None:
    from simcluster.apiserver.resources import _checked

    with pytest.raises(ValueError, match=r"core/v1 \['pods'\]: 5 columns, want 6"):
        _checked("", "v1", ["pods", "Pod", True, [], []])
    with pytest.raises(ValueError, match="deleteAnswer 'deleted' is not one of"):
        _checked("apps", "v1", ["deployments", "Deployment", True, [], [], "deleted"])
