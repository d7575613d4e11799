"""Protocol behaviours as upstream, through raw HTTP: boolean query values, the watch
cache's time window, the BOOKMARK before a watch's timeout, graceful deletion at grace 0,
DeleteOptions validation, no cluster-wide deletecollection, a Terminating namespace."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from simcluster.apiserver.http import ServerSettings
from simcluster.embedded import EmbeddedCluster
from tests.support.wait import wait_until

CMS = "/api/v1/namespaces/t/configmaps"
PODS = "/api/v1/namespaces/t/pods"
MERGE = {"Content-Type": "application/merge-patch+json"}


def _token(kubeconfig: Path) -> str:
    return str(yaml.safe_load(kubeconfig.read_text())["users"][0]["user"]["token"])


def _client(settings: ServerSettings) -> Iterator[httpx.Client]:
    with EmbeddedCluster(settings) as cluster:
        assert cluster.server is not None and cluster.server.certs is not None
        with httpx.Client(
            base_url=cluster.server.url,
            headers={"Authorization": f"Bearer {_token(cluster.kubeconfig)}"},
            verify=cluster.server.certs.client_context(),
            timeout=30,
        ) as client:
            assert client.post("/api/v1/namespaces", json={"metadata": {"name": "t"}}).is_success
            yield client


@pytest.fixture
def http() -> Iterator[httpx.Client]:
    yield from _client(ServerSettings(watch_window_s=0.5, bookmark_interval_s=60))


def _lines(http: httpx.Client, path: str, **query: str) -> list[dict[str, Any]]:
    with http.stream("GET", path, params=query) as r:
        assert r.status_code == 200
        return [json.loads(line) for line in r.iter_lines() if line]


def _cm(name: str) -> dict[str, Any]:
    return {"metadata": {"name": name}, "data": {}}


def test_watch_query_values_as_upstreams_bool(http: httpx.Client) -> None:
    assert http.post(CMS, json=_cm("a")).status_code == 201
    for value in ("True", "yes", ""):
        events = _lines(http, CMS, watch=value, timeoutSeconds="1")
        assert [e["type"] for e in events] == ["ADDED"], value
    for value in ("false", "FALSE", "0"):
        listed = http.get(CMS, params={"watch": value}).json()
        assert listed["kind"] == "ConfigMapList", value


def test_the_watch_window_is_time_based(http: httpx.Client) -> None:
    rv = http.post(CMS, json=_cm("b")).json()["metadata"]["resourceVersion"]
    http.post(CMS, json=_cm("c"))
    # within the window (and far under the 10,000-event history) the resume replays
    resumed = _lines(http, CMS, watch="1", resourceVersion=rv, timeoutSeconds="1")
    assert [e["object"]["metadata"]["name"] for e in resumed] == ["c"]

    def expired() -> bool:
        events = _lines(http, CMS, watch="1", resourceVersion=rv, timeoutSeconds="1")
        return bool(events) and events[0]["type"] == "ERROR"

    wait_until(expired, timeout_s=10)
    error = _lines(http, CMS, watch="1", resourceVersion=rv, timeoutSeconds="1")[0]["object"]
    assert (error["code"], error["reason"]) == (410, "Expired")


def test_a_bookmark_comes_shortly_before_the_timeout(http: httpx.Client) -> None:
    events = _lines(http, CMS, watch="1", allowWatchBookmarks="true", timeoutSeconds="3")
    assert [e["type"] for e in events] == ["BOOKMARK"]  # the interval is 60 s
    # without allowWatchBookmarks, none
    assert _lines(http, CMS, watch="1", timeoutSeconds="3") == []


def test_deleting_at_grace_0_writes_the_deletion_timestamp_first(http: httpx.Client) -> None:
    pod = {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "i:1"}]}}
    created = http.post(PODS, json=pod).json()
    rv = created["metadata"]["resourceVersion"]
    deleted = http.delete(f"{PODS}/p")  # unbound: grace 0
    assert deleted.status_code == 200
    assert deleted.json()["metadata"]["deletionTimestamp"]
    assert deleted.json()["metadata"]["deletionGracePeriodSeconds"] == 0
    events = _lines(http, PODS, watch="1", resourceVersion=rv, timeoutSeconds="1")
    assert [e["type"] for e in events] == ["MODIFIED", "DELETED"]
    modified = events[0]["object"]["metadata"]
    assert modified["deletionTimestamp"]
    assert modified["generation"] == created["metadata"]["generation"] + 1
    assert http.get(f"{PODS}/p").status_code == 404


def test_delete_options_are_validated(http: httpx.Client) -> None:
    assert http.post(CMS, json=_cm("d")).status_code == 201
    r = http.request("DELETE", f"{CMS}/d", json={"propagationPolicy": "Sometimes"})
    assert r.status_code == 422
    status = r.json()
    assert status["message"].startswith('DeleteOptions.meta.k8s.io "" is invalid: ')
    assert status["details"]["causes"][0]["field"] == "propagationPolicy"
    assert 'supported values: "Foreground", "Background", "Orphan", "nil"' in status["message"]
    both = {"propagationPolicy": "Orphan", "orphanDependents": True}
    assert http.request("DELETE", f"{CMS}/d", json=both).status_code == 422
    assert http.get(f"{CMS}/d").status_code == 200
    r = http.request("DELETE", f"{CMS}/d", json={"propagationPolicy": "Background"})
    assert r.status_code == 200


def test_no_cluster_wide_deletecollection(http: httpx.Client) -> None:
    assert http.post(CMS, json=_cm("e")).status_code == 201
    r = http.delete("/api/v1/configmaps")
    assert r.status_code == 405
    assert r.json()["reason"] == "MethodNotAllowed"
    assert http.get(f"{CMS}/e").status_code == 200
    assert http.delete(CMS).status_code == 200
    assert http.get(f"{CMS}/e").status_code == 404


def test_a_terminating_namespace_refuses_new_content(http: httpx.Client) -> None:
    ns = {"metadata": {"name": "doomed", "finalizers": ["example.com/hold"]}}
    assert http.post("/api/v1/namespaces", json=ns).status_code == 201
    assert http.post("/api/v1/namespaces/doomed/configmaps", json=_cm("old")).status_code == 201
    r = http.delete("/api/v1/namespaces/doomed")
    assert r.json()["status"]["phase"] == "Terminating"
    # content drains; the namespace stays Terminating while its finalizer holds it
    wait_until(lambda: http.get("/api/v1/namespaces/doomed/configmaps/old").status_code == 404)
    r = http.post("/api/v1/namespaces/doomed/configmaps", json=_cm("new"))
    assert r.status_code == 403
    status = r.json()
    assert status["reason"] == "Forbidden"
    assert "because it is being terminated" in status["message"]
    assert status["details"]["causes"] == [
        {
            "reason": "NamespaceTerminating",
            "message": "namespace doomed is being terminated",
            "field": "metadata.namespace",
        }
    ]
    assert http.get("/api/v1/namespaces/doomed").json()["status"]["phase"] == "Terminating"
    release = {"metadata": {"finalizers": None}}
    assert http.patch("/api/v1/namespaces/doomed", json=release, headers=MERGE).is_success
    assert http.get("/api/v1/namespaces/doomed").status_code == 404
