"""The SDK's retry and error behaviour against a scripted aiohttp server on loopback.

Real sockets, no mocks: the server answers each route from a script (503, 429 with
Retry-After, then success) and records what the SDK sent, so the tests see exactly which
calls are repeated, with which headers, after how long.
"""

from __future__ import annotations

import contextlib
import json
import socket
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from sandman import (
    AsyncSandman,
    ConnectionFailed,
    DaemonUnreachable,
    InvalidRequest,
    QuotaExceeded,
    RateLimited,
    RetriableError,
    RetryPolicy,
    SandboxNotFound,
    ServerError,
    ServiceUnavailable,
    TerminalError,
)
from tests.support.wait import wait_until_async

pytestmark = pytest.mark.anyio
FAST = RetryPolicy(attempts=4, initial_s=0.01, max_backoff_s=0.05)
SANDBOX = {"id": "sb-1", "owner": "o", "class": "tiny", "image": "img", "state": "ready"}


def _error(status: int, reason: str, retry_after: int | None = None) -> web.Response:
    headers = {"Retry-After": str(retry_after)} if retry_after is not None else {}
    body = json.dumps({"error": {"reason": reason, "message": f"scripted {reason}"}})
    return web.Response(status=status, text=body, content_type="application/json", headers=headers)


def _ok(body: Any, status: int = 200) -> web.Response:
    return web.json_response(body, status=status)


@dataclass
class Script:
    """Per route key (``METHOD path``): answers to give in order; the last one repeats."""

    answers: dict[str, list[web.Response]] = field(default_factory=dict)
    seen: list[tuple[str, web.Request, bytes]] = field(default_factory=list)

    def count(self, key: str) -> int:
        return sum(1 for k, _, _ in self.seen if k == key)

    async def handle(self, request: web.Request) -> web.Response:
        key = f"{request.method} {request.path}"
        self.seen.append((key, request, await request.read()))
        queue = self.answers.get(key)
        if not queue:
            return _error(404, "not_found")
        return queue.pop(0) if len(queue) > 1 else _copy(queue[0])


def _copy(response: web.Response) -> web.Response:
    return web.Response(
        status=response.status,
        body=response.body,
        headers={k: v for k, v in response.headers.items() if k.lower() != "content-length"},
    )


@contextlib.asynccontextmanager
async def _server(script: Script) -> AsyncIterator[str]:
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", script.handle)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    try:
        yield str(server.make_url("")).rstrip("/")
    finally:
        await server.close()


def _client(url: str, **kwargs: Any) -> AsyncSandman:
    return AsyncSandman(url, "t0ken", retry=kwargs.pop("retry", FAST), **kwargs)


async def test_idempotent_get_retries_5xx_then_succeeds() -> None:
    answers = [_error(503, "cluster_unavailable"), _error(429, "cluster_throttled"), _ok(SANDBOX)]
    script = Script({"GET /v1/sandboxes/sb-1": answers})
    async with _server(script) as url:
        client = _client(url, lease_s=None, release_on_exit=False)
        try:
            sandbox = await client.get("sb-1")
            assert sandbox.state == "ready"
            assert script.count("GET /v1/sandboxes/sb-1") == 3
        finally:
            await client.aclose()
    auth = script.seen[0][1].headers["Authorization"]
    assert auth == "Bearer t0ken"


async def test_429_waits_for_retry_after_and_create_keeps_its_key() -> None:
    script = Script({"POST /v1/sandboxes": [_error(429, "rate_limited", retry_after=1),
                                            _error(503, "cluster_unavailable"),
                                            _ok(SANDBOX, 201)]})  # fmt: skip
    async with _server(script) as url:
        client = _client(url, lease_s=None, release_on_exit=False)
        try:
            started = time.monotonic()
            sandbox = await client.create("img", wait=False)
            elapsed = time.monotonic() - started
        finally:
            await client.aclose()
    assert sandbox.id == "sb-1"
    assert elapsed >= 0.95, "the retry came before Retry-After"
    keys = {r.headers["Idempotency-Key"] for k, r, _ in script.seen if k == "POST /v1/sandboxes"}
    assert len(keys) == 1 and script.count("POST /v1/sandboxes") == 3
    body = json.loads(script.seen[0][2])
    assert body["owner"] == client.owner and body["class"] == "tiny"


async def test_retries_give_up_with_the_last_typed_error() -> None:
    script = Script(
        {
            "GET /v1/sandboxes/sb-1": [_error(503, "cluster_unavailable")],
            "GET /v1/sandboxes/sb-3": [_ok({**SANDBOX, "id": "sb-3"})],
            "DELETE /v1/sandboxes/sb-3": [_error(429, "quota_exceeded", retry_after=3600)],
        }
    )
    async with _server(script) as url:
        client = _client(url, lease_s=None, release_on_exit=False)
        try:
            with pytest.raises(ServiceUnavailable) as unavailable:
                await client.get("sb-1")
            assert isinstance(unavailable.value, RetriableError)
            assert unavailable.value.status == 503
            assert script.count("GET /v1/sandboxes/sb-1") == FAST.attempts
            sandbox = await client.get("sb-3")
            with pytest.raises(QuotaExceeded) as quota:
                await sandbox.release()
        finally:
            await client.aclose()
    # A Retry-After beyond RetryPolicy.max_retry_after_s is an answer, not a delay.
    assert quota.value.retry_after_s == 3600 and isinstance(quota.value, RateLimited)
    assert script.count("DELETE /v1/sandboxes/sb-3") == 1


async def test_terminal_errors_are_never_retried_and_an_exec_only_under_its_id() -> None:
    script = Script(
        {
            "GET /v1/sandboxes/sb-1": [_ok(SANDBOX)],
            "POST /v1/sandboxes/sb-1/exec": [_error(502, "daemon_unreachable")],
            "GET /v1/sandboxes/sb-2": [_error(404, "sandbox_not_found")],
            "POST /v1/sandboxes": [_error(400, "unknown_class")],
            "GET /v1/classes": [_error(502, "cluster_error")],
        }
    )
    async with _server(script) as url:
        client = _client(url, lease_s=None, release_on_exit=False)
        try:
            sandbox = await client.get("sb-1")
            with pytest.raises(DaemonUnreachable):  # re-sent under its id, the same body
                await sandbox.exec("true")
            sent = [body for key, _, body in script.seen if key.endswith("/exec")]
            assert len(sent) == FAST.attempts and len(set(sent)) == 1
            assert json.loads(sent[0])["id"]
            with pytest.raises(DaemonUnreachable):  # another call: another id
                await sandbox.exec("true")
            assert json.loads(script.seen[-1][2])["id"] != json.loads(sent[0])["id"]
            with pytest.raises(SandboxNotFound):
                await client.get("sb-2")
            with pytest.raises(InvalidRequest) as invalid:
                await client.create("img", sandbox_class="huge")
            assert isinstance(invalid.value, TerminalError)
            assert invalid.value.reason == "unknown_class"
            assert script.count("POST /v1/sandboxes") == 1
            with pytest.raises(ServerError):  # a 502 the API server refused: not transient
                await client.classes()
            assert script.count("GET /v1/classes") == 1
        finally:
            await client.aclose()


async def test_connection_refused_is_retriable_and_chained() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # bound, not listening: connections are refused
        client = _client(f"http://127.0.0.1:{port}", lease_s=None, release_on_exit=False)
        try:
            with pytest.raises(ConnectionFailed) as refused:
                await client.get("sb-1")
        finally:
            await client.aclose()
    assert refused.value.retriable and refused.value.__cause__ is not None


async def test_batch_retries_failed_members_with_the_same_key() -> None:
    member = {**SANDBOX, "state": "pending"}
    partial = {"sandboxes": [member], "failed": [
        {"index": 1, "reason": "cluster_throttled", "message": "slow down"}]}  # fmt: skip
    full = {"sandboxes": [member, {**member, "id": "sb-2"}], "failed": []}
    script = Script({"POST /v1/batches": [_ok(partial, 201), _ok(full, 201)]})
    async with _server(script) as url:
        client = _client(url, lease_s=None, release_on_exit=False)
        try:
            sandboxes = await client.create_many(
                2, "img", wait=False, labels={"a": "b"}, idempotency_key="run-7-step-3"
            )
        finally:
            await client.aclose()
    assert [s.id for s in sandboxes] == ["sb-1", "sb-2"]
    keys = [r.headers["Idempotency-Key"] for k, r, _ in script.seen if k == "POST /v1/batches"]
    assert keys == ["run-7-step-3-0", "run-7-step-3-0"]  # chunk 0 of the caller's key
    assert json.loads(script.seen[0][2])["spec"]["labels"] == {"a": "b"}


async def test_lease_is_renewed_in_the_background_and_exit_releases_the_owner() -> None:
    status = {"owner": "o", "duration_s": 1, "renewed_at": "now"}
    script = Script(
        {
            "PUT /v1/owners/run-x/lease": [_ok(status), _error(503, "cluster_unavailable"),
                                           _error(503, "cluster_unavailable"), _ok(status)],
            "DELETE /v1/sandboxes": [_ok({"owner": "run-x", "released": 3}, 202)],
        }
    )  # fmt: skip
    retry = RetryPolicy(attempts=1)  # every failed renewal is logged; the loop keeps going
    async with (
        _server(script) as url,
        _client(url, owner="run-x", lease_s=1, retry=retry) as client,
    ):
        assert script.count("PUT /v1/owners/run-x/lease") == 1  # renewed on entry
        await wait_until_async(
            lambda: script.count("PUT /v1/owners/run-x/lease") >= 5,
            timeout_s=5,
            interval_s=0.05,
            what="renewals to go on after failures",
        )
        assert client.owner == "run-x"
    release = [r for k, r, _ in script.seen if k == "DELETE /v1/sandboxes"]
    assert len(release) == 1 and release[0].query["owner"] == "run-x"
    assert json.loads(script.seen[0][2]) == {"duration_s": 1}
