"""The facade's HTTP API end to end: trainer → facade → simcluster → controller → daemon."""

from __future__ import annotations

import asyncio
import io
import time
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest

from sandman.stack import Stack

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(90)]
IMAGE = "registry.example/tasks/demo:1"


@pytest.fixture
async def http(stack: Stack) -> AsyncIterator[aiohttp.ClientSession]:
    headers = {"Authorization": f"Bearer {stack.token}"}
    async with aiohttp.ClientSession(stack.url, headers=headers) as session:
        yield session


async def _json(response: aiohttp.ClientResponse) -> Any:
    return await response.json(content_type=None)


async def _release_owner(http: aiohttp.ClientSession, owner: str) -> None:
    async with http.delete("/v1/sandboxes", params={"owner": owner}) as r:
        assert r.status == 202, await r.text()


async def _gone(http: aiohttp.ClientSession, owner: str, timeout_s: float = 20) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        async with http.get("/v1/sandboxes", params={"owner": owner}) as r:
            if not (await _json(r))["items"]:
                return
        assert time.monotonic() < deadline, "sandboxes still listed after release"
        await asyncio.sleep(0.2)


async def test_create_wait_exec_state_persists_release(
    http: aiohttp.ClientSession, owner: str
) -> None:
    spec = {"image": IMAGE, "owner": owner, "env": {"TASK": "t1"}, "labels": {"task": "t1"}}
    async with http.post("/v1/sandboxes", json=spec) as r:
        assert r.status == 201, await r.text()
        sid = (await _json(r))["id"]
    async with http.get(f"/v1/sandboxes/{sid}", params={"wait": "ready", "timeout_s": "30"}) as r:
        sandbox = await _json(r)
    assert sandbox["state"] == "ready", sandbox
    assert sandbox["labels"] == {"task": "t1"} and sandbox["node"]
    cmd = {"command": "cd /tmp && echo $TASK > note && export X=1"}
    async with http.post(f"/v1/sandboxes/{sid}/exec", json=cmd) as r:
        assert r.status == 200, await r.text()
    async with http.get(f"/v1/sandboxes/{sid}/files", params={"path": "/tmp/note"}) as r:
        assert await r.read() == b"t1\n"
    async with http.post(f"/v1/sandboxes/{sid}/sessions", json={"name": "sh"}) as r:
        assert r.status in (200, 201), await r.text()
    for command, expected in (("cd /tmp; export Y=2", ""), ("echo $Y $(pwd)", "2 /tmp")):
        async with http.post(
            f"/v1/sandboxes/{sid}/sessions/sh/run", json={"command": command}
        ) as r:
            assert (await _json(r))["output"]["data"].strip() == expected
    async with http.delete(f"/v1/sandboxes/{sid}") as r:
        assert r.status == 202 and (await _json(r))["state"] == "releasing"
    async with http.post(f"/v1/sandboxes/{sid}/exec", json=cmd) as r:
        assert r.status in (404, 410), await r.text()
    await _gone(http, owner)


async def test_idempotent_create_and_batch(http: aiohttp.ClientSession, owner: str) -> None:
    spec = {"image": IMAGE, "owner": owner}
    key = {"Idempotency-Key": f"{owner}-one"}
    async with http.post("/v1/sandboxes", json=spec, headers=key) as r:
        first = (r.status, (await _json(r))["id"])
    async with http.post("/v1/sandboxes", json=spec, headers=key) as r:
        again = (r.status, (await _json(r))["id"])
    assert first[0] == 201 and again == (200, first[1])
    other = {**spec, "env": {"A": "b"}}
    async with http.post("/v1/sandboxes", json=other, headers=key) as r:
        assert r.status == 409 and (await _json(r))["error"]["reason"] == "idempotency_key_reused"
    batch = {"spec": spec, "count": 6}
    bkey = {"Idempotency-Key": f"{owner}-batch"}
    async with http.post("/v1/batches", json=batch, headers=bkey) as r:
        ids = [s["id"] for s in (await _json(r))["sandboxes"]]
    async with http.post("/v1/batches", json=batch, headers=bkey) as r:
        assert [s["id"] for s in (await _json(r))["sandboxes"]] == ids
    async with http.get("/v1/sandboxes", params={"owner": owner, "limit": "4"}) as r:
        page = await _json(r)
    assert len(page["items"]) == 4 and page["continue"]
    async with http.get(
        "/v1/sandboxes", params={"owner": owner, "limit": "4", "continue": page["continue"]}
    ) as r:
        rest = await _json(r)
    assert len(rest["items"]) == 3 and rest["continue"] is None
    assert {s["id"] for s in page["items"] + rest["items"]} == {first[1], *ids}
    await _release_owner(http, owner)
    await _gone(http, owner)


async def test_bad_input_gets_typed_errors(http: aiohttp.ClientSession, stack: Stack) -> None:
    cases: list[tuple[str, str, Any, int, str]] = [
        ("POST", "/v1/sandboxes", {"image": IMAGE}, 400, "invalid_request"),
        ("POST", "/v1/sandboxes", {"image": IMAGE, "owner": "o", "class": "huge"}, 400,
         "unknown_class"),
        ("POST", "/v1/sandboxes", {"image": IMAGE, "owner": "bad owner!"}, 400, "invalid_owner"),
        ("POST", "/v1/sandboxes", {"image": IMAGE, "owner": "o", "ttl_s": 0}, 400,
         "invalid_request"),
        ("POST", "/v1/batches", {"spec": {"image": IMAGE, "owner": "o"}, "count": 0}, 400,
         "invalid_request"),
        ("GET", "/v1/sandboxes/sb-nope", None, 404, "sandbox_not_found"),
        ("DELETE", "/v1/sandboxes", None, 400, "owner_required"),
        ("GET", "/v1/nothing", None, 404, "not_found"),
    ]  # fmt: skip
    for method, path, body, status, reason in cases:
        async with http.request(method, path, json=body) as r:
            error = (await _json(r))["error"]
            assert (r.status, error["reason"]) == (status, reason), (path, body, error)
    async with http.post("/v1/sandboxes", data=b"{not json") as r:
        assert r.status == 400 and (await _json(r))["error"]["reason"] == "invalid_json"
    async with http.post("/v1/sandboxes", data=io.BytesIO(b"x" * (2 << 20))) as r:
        assert r.status == 413 and (await _json(r))["error"]["reason"] == "body_too_large"
    async with aiohttp.ClientSession(stack.url) as anonymous:
        async with anonymous.get("/v1/sandboxes") as r:
            assert r.status == 401 and (await _json(r))["error"]["reason"] == "unauthenticated"
        async with anonymous.get("/readyz") as r:
            assert r.status == 200
        async with anonymous.get("/openapi.json") as r:
            assert (await _json(r))["info"]["title"] == "Sandman facade"
        async with anonymous.get("/metrics") as r:
            assert "sandman_facade_requests_total" in await r.text()


async def test_quota_is_a_429_with_retry_after(http: aiohttp.ClientSession, owner: str) -> None:
    batch = {"spec": {"image": IMAGE, "owner": owner}, "count": 601}
    async with http.post("/v1/batches", json=batch) as r:
        assert r.status == 400 and (await _json(r))["error"]["reason"] == "batch_too_large"
    batch["count"] = 590
    async with http.post("/v1/batches", json=batch) as r:
        assert r.status == 201, await r.text()
    async with http.post("/v1/batches", json={**batch, "count": 20}) as r:
        assert r.status == 429
        assert (await _json(r))["error"]["reason"] == "quota_exceeded"
        assert int(r.headers["Retry-After"]) >= 1
    await _release_owner(http, owner)
    await _gone(http, owner, timeout_s=60)
