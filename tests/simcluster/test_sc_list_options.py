"""List and watch options as upstream, through raw HTTP: ``resourceVersionMatch``
(NotOlderThan, Exact, 410 when compacted), a future resourceVersion (504 with the
``ResourceVersionTooLarge`` cause and Retry-After), the option combinations
``ValidateListOptions`` refuses, ``sendInitialEvents`` with its companions, and pagination
from one consistent snapshot (410 with a fresh continue token once it is compacted)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from simcluster.apiserver.http import ServerSettings
from simcluster.embedded import EmbeddedCluster
from tests.support.kubectl import admin_http

Obj = dict[str, Any]
HISTORY = 40  # watch events kept: writing this many more compacts everything before


@pytest.fixture(scope="module")
def http() -> Iterator[httpx.Client]:
    settings = ServerSettings(history=HISTORY)
    with EmbeddedCluster(settings) as cluster, admin_http(cluster.kubeconfig) as client:
        yield client


@pytest.fixture
def cms(http: httpx.Client, request: pytest.FixtureRequest) -> str:
    name = request.node.name.replace("_", "-")[:50].strip("-")
    assert http.post("/api/v1/namespaces", json={"metadata": {"name": name}}).is_success
    return f"/api/v1/namespaces/{name}/configmaps"


def _create(http: httpx.Client, cms: str, name: str, value: str = "1") -> Obj:
    r = http.post(cms, json={"metadata": {"name": name}, "data": {"v": value}})
    assert r.status_code == 201, r.text
    return dict(r.json())


def _names(listed: Obj) -> list[str]:
    return [o["metadata"]["name"] for o in listed["items"]]


def _compact(http: httpx.Client, cms: str) -> None:
    for i in range(HISTORY):
        _create(http, cms, f"filler-{i:02}")


def test_pages_come_from_the_first_pages_snapshot(http: httpx.Client, cms: str) -> None:
    for name in ("a", "b", "c", "d"):
        _create(http, cms, name)
    first = http.get(cms, params={"limit": "2"}).json()
    assert _names(first) == ["a", "b"]
    http.delete(f"{cms}/c")
    _create(http, cms, "bb")
    http.put(f"{cms}/d", json={"metadata": {"name": "d"}, "data": {"v": "2"}})
    second = http.get(cms, params={"limit": "2", "continue": first["metadata"]["continue"]})
    page = second.json()
    assert _names(page) == ["c", "d"]  # as of the first page: c not yet deleted, no bb
    assert page["items"][1]["data"] == {"v": "1"}
    assert page["metadata"]["resourceVersion"] == first["metadata"]["resourceVersion"]
    # once the snapshot is compacted: 410 with a token that goes on from the latest state
    _compact(http, cms)
    r = http.get(cms, params={"limit": "2", "continue": first["metadata"]["continue"]})
    assert (r.status_code, r.json()["reason"]) == (410, "Expired")
    assert "use the continue token in this response" in r.json()["message"]
    rest = http.get(cms, params={"continue": r.json()["metadata"]["continue"]}).json()
    assert _names(rest)[:2] == ["bb", "d"]
    assert rest["items"][1]["data"] == {"v": "2"}


def test_resource_version_match(http: httpx.Client, cms: str) -> None:
    rv = _create(http, cms, "a")["metadata"]["resourceVersion"]
    _create(http, cms, "b")
    exact = http.get(cms, params={"resourceVersion": rv, "resourceVersionMatch": "Exact"})
    assert _names(exact.json()) == ["a"]
    assert exact.json()["metadata"]["resourceVersion"] == rv
    newer = http.get(cms, params={"resourceVersion": rv, "resourceVersionMatch": "NotOlderThan"})
    assert _names(newer.json()) == ["a", "b"]
    assert int(newer.json()["metadata"]["resourceVersion"]) > int(rv)
    _compact(http, cms)
    gone = http.get(cms, params={"resourceVersion": rv, "resourceVersionMatch": "Exact"})
    assert (gone.status_code, gone.json()["reason"]) == (410, "Expired")
    assert gone.json()["message"] == "The resourceVersion for the provided list is too old."


def test_a_future_resource_version_is_too_large(http: httpx.Client, cms: str) -> None:
    current = int(http.get(cms).json()["metadata"]["resourceVersion"])
    for match in ("NotOlderThan", "Exact"):
        query = {"resourceVersion": str(current + 100), "resourceVersionMatch": match}
        r = http.get(cms, params=query)
        assert (r.status_code, r.headers.get("Retry-After")) == (504, "1")
        status = r.json()
        assert status["reason"] == "Timeout"
        assert status["message"].startswith(
            f"Timeout: Too large resource version: {current + 100}, current: "
        )
        assert status["details"]["causes"] == [
            {"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}
        ]
        assert status["details"]["retryAfterSeconds"] == 1
    r = http.get(f"{cms}/absent", params={"resourceVersion": str(current + 100)})
    assert (r.status_code, r.json()["details"]["causes"][0]["reason"]) == (
        504,
        "ResourceVersionTooLarge",
    )  # a get too, before looking the object up


def test_continue_with_a_resource_version_is_400(http: httpx.Client, cms: str) -> None:
    for name in ("a", "b"):
        _create(http, cms, name)
    first = http.get(cms, params={"limit": "1"}).json()["metadata"]
    query = {"continue": first["continue"], "resourceVersion": first["resourceVersion"]}
    r = http.get(cms, params=query)
    assert r.status_code == 400
    assert r.json()["message"] == "specifying resource version is not allowed when using continue"


@pytest.mark.parametrize(
    ("query", "message"),
    [
        (
            {"resourceVersionMatch": "Exact"},
            "resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden unless resourceVersion is provided",  # noqa: E501
        ),
        (
            {"resourceVersion": "1", "resourceVersionMatch": "Newest"},
            'resourceVersionMatch: Unsupported value: "Newest": supported values: "Exact", "NotOlderThan", ""',  # noqa: E501
        ),
        (
            {"resourceVersion": "0", "resourceVersionMatch": "Exact"},
            'resourceVersionMatch: Forbidden: resourceVersionMatch "exact" is forbidden for resourceVersion "0"',  # noqa: E501
        ),
        (
            {"sendInitialEvents": "true"},
            "sendInitialEvents: Forbidden: sendInitialEvents is forbidden for list",
        ),
        (
            {"watch": "1", "sendInitialEvents": "true"},
            "resourceVersionMatch: Forbidden: sendInitialEvents requires setting resourceVersionMatch to NotOlderThan",  # noqa: E501
        ),
        (
            {"watch": "1", "resourceVersionMatch": "NotOlderThan"},
            "resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided",  # noqa: E501
        ),
    ],
    ids=[
        "match-without-rv",
        "match-unknown",
        "exact-at-0",
        "list-initial-events",
        "watch-initial-events-alone",
        "watch-match-alone",
    ],
)
def test_bad_option_combinations_get_upstreams_422(
    http: httpx.Client, query: dict[str, str], message: str
) -> None:
    r = http.get("/api/v1/namespaces/default/configmaps", params=query)
    assert r.status_code == 422
    status = r.json()
    assert status["message"] == f'ListOptions.meta.k8s.io "" is invalid: {message}'
    assert status["details"]["group"] == "meta.k8s.io"


def _watch(http: httpx.Client, cms: str, **query: str) -> list[Obj]:
    params = {"watch": "1", "timeoutSeconds": "1", **query}
    with http.stream("GET", cms, params=params) as r:
        assert r.status_code == 200
        return [json.loads(line) for line in r.iter_lines() if line]


def test_send_initial_events_ends_with_the_annotated_bookmark(http: httpx.Client, cms: str) -> None:
    _create(http, cms, "a")
    base = {"sendInitialEvents": "true", "resourceVersionMatch": "NotOlderThan"}
    events = _watch(http, cms, allowWatchBookmarks="true", **base)
    assert [e["type"] for e in events[:2]] == ["ADDED", "BOOKMARK"]
    end = events[1]["object"]["metadata"]
    assert end["annotations"] == {"k8s.io/initial-events-end": "true"}
    # without allowWatchBookmarks, the initial events and no bookmark
    assert [e["type"] for e in _watch(http, cms, **base)] == ["ADDED"]


def test_a_watch_from_a_future_version_waits_for_it(http: httpx.Client, cms: str) -> None:
    current = int(_create(http, cms, "a")["metadata"]["resourceVersion"])
    params = {"watch": "1", "timeoutSeconds": "2", "resourceVersion": str(current + 2)}
    with http.stream("GET", cms, params=params) as r:
        for name in ("b", "c", "d"):  # revisions current+1 .. current+3
            _create(http, cms, name)
        events = [json.loads(line) for line in r.iter_lines() if line]
    assert [e["object"]["metadata"]["name"] for e in events] == ["d"]


def test_listed_items_carry_no_type_meta(http: httpx.Client, cms: str) -> None:
    """As upstream (kubernetes/kubernetes#3030): the list has ``kind``/``apiVersion``, its
    items do not; a GET and a watch event's object do."""
    _create(http, cms, "typed")
    listing = http.get(cms).json()
    assert (listing["kind"], listing["apiVersion"]) == ("ConfigMapList", "v1")
    assert [set(item) & {"kind", "apiVersion"} for item in listing["items"]] == [set()]
    got = http.get(f"{cms}/typed").json()
    assert (got["kind"], got["apiVersion"]) == ("ConfigMap", "v1")
    rv = listing["metadata"]["resourceVersion"]
    _create(http, cms, "watched")
    with http.stream("GET", cms, params={"watch": "true", "resourceVersion": rv}) as stream:
        first = json.loads(next(stream.iter_lines()))
    assert first["object"]["kind"] == "ConfigMap"
