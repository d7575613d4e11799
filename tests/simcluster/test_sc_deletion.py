"""Deletion as upstream's registry and garbage collector do it, through raw HTTP: the
propagation policies with their finalizers (``foregroundDeletion``, ``orphan``), owners with
``blockOwnerDeletion`` dependents, dependents with another owner, negative grace periods."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from simcluster.embedded import EmbeddedCluster
from tests.support.kubectl import admin_http
from tests.support.wait import wait_until

Obj = dict[str, Any]
NS = "/api/v1/namespaces"
MERGE = {"Content-Type": "application/merge-patch+json"}


@pytest.fixture(scope="module")
def http() -> Iterator[httpx.Client]:
    with EmbeddedCluster() as cluster, admin_http(cluster.kubeconfig) as client:
        yield client


@pytest.fixture
def ns(http: httpx.Client, request: pytest.FixtureRequest) -> str:
    name = request.node.name.replace("_", "-")[:50].strip("-")
    assert http.post(NS, json={"metadata": {"name": name}}).status_code == 201
    return f"{NS}/{name}"


def _owner_ref(owner: Obj, block: bool | None = None) -> Obj:
    ref = {
        "apiVersion": owner["apiVersion"],
        "kind": owner["kind"],
        "name": owner["metadata"]["name"],
        "uid": owner["metadata"]["uid"],
    }
    if block is not None:
        ref["blockOwnerDeletion"] = block
    return ref


def _cm(http: httpx.Client, ns: str, name: str, *refs: Obj, **meta: Any) -> Obj:
    body = {"metadata": {"name": name, "ownerReferences": list(refs), **meta}, "data": {}}
    r = http.post(f"{ns}/configmaps", json=body)
    assert r.status_code == 201, r.text
    return dict(r.json())


def _gone(http: httpx.Client, path: str) -> bool:
    return http.get(path).status_code == 404


def _events(http: httpx.Client, path: str, rv: str) -> list[tuple[str, str]]:
    params = {"watch": "1", "resourceVersion": rv, "timeoutSeconds": "1"}
    with http.stream("GET", path, params=params) as r:
        lines = [json.loads(line) for line in r.iter_lines() if line]
    return [(e["type"], e["object"]["metadata"]["name"]) for e in lines]


def test_foreground_waits_for_blocking_dependents(http: httpx.Client, ns: str) -> None:
    deployment = {
        "metadata": {"name": "owner"},
        "spec": {
            "selector": {"matchLabels": {"a": "b"}},
            "template": {
                "metadata": {"labels": {"a": "b"}},
                "spec": {"containers": [{"name": "c", "image": "i:1"}]},
            },
        },
    }
    apps = ns.replace("/api/v1/", "/apis/apps/v1/") + "/deployments"
    owner = http.post(apps, json=deployment).json()
    _cm(http, ns, "blocking", _owner_ref(owner, block=True), finalizers=["example.com/hold"])
    _cm(http, ns, "free", _owner_ref(owner, block=False))
    r = http.request("DELETE", f"{apps}/owner", json={"propagationPolicy": "Foreground"})
    assert r.status_code == 200
    answered = r.json()["metadata"]
    assert answered["deletionTimestamp"] and answered["finalizers"] == ["foregroundDeletion"]
    assert answered["generation"] == owner["metadata"]["generation"] + 1
    wait_until(lambda: _gone(http, f"{ns}/configmaps/free"), timeout_s=5)
    held = http.get(f"{ns}/configmaps/blocking").json()["metadata"]
    assert held["deletionTimestamp"]  # deleted by the collector, held by its own finalizer
    assert http.get(f"{apps}/owner").json()["metadata"]["finalizers"] == ["foregroundDeletion"]
    unhold = {"metadata": {"finalizers": None}}
    assert http.patch(f"{ns}/configmaps/blocking", json=unhold, headers=MERGE).is_success
    wait_until(lambda: _gone(http, f"{apps}/owner"), timeout_s=5)


def test_orphan_sets_the_orphan_finalizer_until_references_are_gone(
    http: httpx.Client, ns: str
) -> None:
    owner = _cm(http, ns, "owner")
    _cm(http, ns, "dependent", _owner_ref(owner, block=True))
    rv = http.get(f"{ns}/configmaps/dependent").json()["metadata"]["resourceVersion"]
    r = http.request("DELETE", f"{ns}/configmaps/owner", json={"propagationPolicy": "Orphan"})
    assert r.status_code == 200
    assert r.json()["metadata"]["finalizers"] == ["orphan"]
    wait_until(lambda: _gone(http, f"{ns}/configmaps/owner"), timeout_s=5)
    kept = http.get(f"{ns}/configmaps/dependent").json()["metadata"]
    assert not kept.get("ownerReferences")
    events = _events(http, f"{ns}/configmaps", rv)
    assert events == [("MODIFIED", "owner"), ("MODIFIED", "dependent"), ("DELETED", "owner")]
    # the legacy orphanDependents, here as a query parameter, does the same
    second = _cm(http, ns, "second")
    _cm(http, ns, "dependent-2", _owner_ref(second))
    r = http.delete(f"{ns}/configmaps/second", params={"orphanDependents": "true"})
    assert r.json()["metadata"]["finalizers"] == ["orphan"]
    wait_until(lambda: _gone(http, f"{ns}/configmaps/second"), timeout_s=5)
    assert not http.get(f"{ns}/configmaps/dependent-2").json()["metadata"].get("ownerReferences")


def test_background_keeps_a_dependent_with_another_owner(http: httpx.Client, ns: str) -> None:
    leaving, staying = _cm(http, ns, "leaving"), _cm(http, ns, "staying")
    _cm(http, ns, "shared", _owner_ref(leaving), _owner_ref(staying))
    _cm(http, ns, "sole", _owner_ref(leaving))
    r = http.request("DELETE", f"{ns}/configmaps/leaving", json={"propagationPolicy": "Background"})
    assert r.json()["kind"] == "Status"  # gone at once: no finalizer, no grace
    wait_until(lambda: _gone(http, f"{ns}/configmaps/sole"), timeout_s=5)

    def only_staying() -> bool:
        refs = http.get(f"{ns}/configmaps/shared").json()["metadata"].get("ownerReferences")
        return [ref["name"] for ref in refs or []] == ["staying"]

    wait_until(only_staying, timeout_s=5)


def test_a_negative_grace_period_is_one_second(http: httpx.Client, ns: str) -> None:
    pod = {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "i:1"}]}}
    assert http.post(f"{ns}/pods", json=pod).status_code == 201
    binding = {"metadata": {"name": "p"}, "target": {"kind": "Node", "name": "n1"}}
    assert http.post(f"{ns}/pods/p/binding", json=binding).status_code == 201
    r = http.delete(f"{ns}/pods/p", params={"gracePeriodSeconds": "x"})
    assert (r.status_code, r.json()["reason"]) == (400, "BadRequest")
    r = http.request("DELETE", f"{ns}/pods/p", json={"gracePeriodSeconds": -5})
    assert r.status_code == 200
    assert r.json()["metadata"]["deletionGracePeriodSeconds"] == 1
