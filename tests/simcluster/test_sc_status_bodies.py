"""Status bodies byte for byte as upstream's kube-apiserver writes them.

Clients and tests that compare response text (golden files, ``kubectl get --raw``, log
scrapers) see key order and trailing newlines, so the server's Status bodies are compared
with a golden file whose expected bytes follow upstream's Go encoding: ``kind, apiVersion,
metadata, status, message, reason, details{name, group, kind, uid, causes[{reason, message,
field}], retryAfterSeconds}, code``, empty fields left out, a newline at the end.

To regenerate after an intended change, run with SANDMAN_UPDATE_GOLDEN=1 and review the
diff against upstream's shape (the test then skips instead of comparing).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from simcluster.embedded import EmbeddedCluster
from simcluster.errors import DETAIL_KEYS, ApiError, Expired, Invalid, TooManyRequests
from tests.support.kubectl import admin_http

GOLDEN = Path(__file__).parent / "golden" / "status_bodies.txt"
CM = "/api/v1/namespaces/default/configmaps"
STATUS_KEYS = ("kind", "apiVersion", "metadata", "status", "message", "reason", "details", "code")


@pytest.fixture(scope="module")
def cluster() -> Iterator[EmbeddedCluster]:
    with EmbeddedCluster() as c:
        yield c


@pytest.fixture(scope="module")
def http(cluster: EmbeddedCluster) -> Iterator[httpx.Client]:
    with admin_http(cluster.kubeconfig) as c:
        yield c


def _fault(http: httpx.Client, code: int) -> None:
    body = {"kind": "api-errors", "verb": "list", "rate": 1.0, "code": code}
    assert http.post("/admin/faults", json=body).status_code == 200


def _responses(http: httpx.Client) -> Iterator[tuple[str, httpx.Response]]:
    """(case, response) for each Status the golden file holds, in its order."""
    yield "not-found-core", http.get(f"{CM}/nope")
    yield "not-found-group", http.get("/apis/apps/v1/namespaces/default/deployments/nope")
    created = http.post(CM, json={"metadata": {"name": "cm"}}).json()
    yield "already-exists", http.post(CM, json={"metadata": {"name": "cm"}})
    stale = {**created, "data": {"a": "1"}}
    assert http.put(f"{CM}/cm", json=stale).status_code == 200
    yield "conflict", http.put(f"{CM}/cm", json=stale)
    yield "invalid", http.post(CM, json={"metadata": {"name": "Bad_Name"}})
    yield "bad-request", http.get("/api/v1/pods", params={"fieldSelector": "spec.foo=bar"})
    yield "unauthorized", http.get(CM, headers={"Authorization": "Bearer nope"})
    for code in (429, 500, 504):
        _fault(http, code)
        yield f"fault-{code}", http.get(CM)
        assert http.post("/admin/faults", json={"kind": "clear"}).status_code == 200
    deleted = http.delete(f"{CM}/cm")
    uid = created["metadata"]["uid"]
    yield (
        "delete-success",
        httpx.Response(200, content=deleted.content.replace(uid.encode(), b"UID")),
    )


def test_status_bodies_are_upstreams_bytes(http: httpx.Client) -> None:
    actual = "".join(f"== {case} {r.status_code}\n{r.text}" for case, r in _responses(http))
    if os.environ.get("SANDMAN_UPDATE_GOLDEN"):
        GOLDEN.write_text(actual)
        pytest.skip("golden file rewritten")
    assert actual == GOLDEN.read_text()


def _subsequence(keys: list[str], order: tuple[str, ...]) -> bool:
    return [k for k in order if k in keys] == keys


@pytest.mark.parametrize(
    "error",
    [
        Invalid.for_object("Pod", "", "p", [("FieldValueRequired", "spec", "Required value")]),
        TooManyRequests("Too many requests", retry_after=2, flow_schema="s", priority_level="l"),
        Expired("too old", continue_token="tok"),
        ApiError("boom", details={"causes": [{"field": "", "message": "m", "reason": "R"}]}),
    ],
    ids=lambda e: type(e).__name__,
)
def test_every_status_keeps_upstreams_key_order(error: ApiError) -> None:
    status = error.to_status()
    assert _subsequence(list(status), STATUS_KEYS)
    details = status.get("details", {})
    assert _subsequence(list(details), DETAIL_KEYS)
    for cause in details.get("causes", []):
        assert _subsequence(list(cause), ("reason", "message", "field")) and all(cause.values())


def test_details_take_only_status_details_fields() -> None:
    with pytest.raises(ValueError, match="not StatusDetails fields: \\['priorityLevel'\\]"):
        ApiError("x", details={"name": "a", "priorityLevel": "p"})
