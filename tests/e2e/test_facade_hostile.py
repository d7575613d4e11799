"""A hostile trainer against the real stack: disguised tool-call paths, and a SIGTERM while
waits are parked.

Paths: the facade's check (facade/paths.py) decides, from the raw path, either a refusal or
the one daemon operation to call; here the same generated paths go to a real facade in
front of a real daemon, and the answer must be that decision — a refusal with the same
status and reason, or the daemon's own answer for an operation it has (never its
``no_such_endpoint``, never its ``/healthz``). Before the fix ``files/../../../healthz``
reached the daemon's health check.

Forwarded ports: generated port paths (the same alphabet after ``ports/<port>/``) go to a
server started in the sandbox; the answer is the facade's decision (``facade.paths.
port_call``): its refusal, or the server's echo of exactly the target the facade decided —
never the daemon's own operations, never a 5xx.

Shutdown: a facade told to stop answers its parked waits 503 ``facade_stopping`` and exits
in about a second, instead of holding them (and itself) for aiohttp's shutdown timeout.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import anyio
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from yarl import URL

from daemon.sandbox.layout import DAEMON_PORT
from devstack.ports import free_listen_port
from facade.errors import FacadeError
from facade.paths import port_call, proxied_call
from tests.support.paths import daemon_call, hostile_call, port_request
from tests.support.stack import RunningStack
from tests.support.wait import wait_until_async

SERVER = Path(__file__).resolve().parents[1] / "support" / "port_server.py"

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(120)]
IMAGE = "registry.example/tasks/demo:1"
HEALTHZ = b'{"status":"ok"}'


@pytest.fixture(scope="module")
async def sandbox(stack: RunningStack) -> AsyncIterator[str]:
    """One ready sandbox (a real daemon) for the module's paths."""
    headers = {"Authorization": f"Bearer {stack.token}"}
    async with aiohttp.ClientSession(stack.url, headers=headers) as http:
        async with http.post("/v1/sandboxes", json={"image": IMAGE, "owner": "hostile"}) as r:
            sid = str((await r.json())["id"])
        async with http.get(f"/v1/sandboxes/{sid}", params={"wait": "ready"}) as r:
            assert (await r.json())["state"] == "ready"
        yield sid
        async with http.delete("/v1/sandboxes", params={"owner": "hostile"}) as r:
            assert r.status == 202


async def _send(stack: RunningStack, method: str, raw: str) -> tuple[int, bytes]:
    headers = {"Authorization": f"Bearer {stack.token}"}
    async with (
        aiohttp.ClientSession(headers=headers) as http,
        http.request(method, URL(stack.url + raw, encoded=True)) as r,
    ):
        return r.status, await r.read()


def _reason(body: bytes) -> str | None:
    try:
        return str(json.loads(body)["error"]["reason"])
    except (ValueError, KeyError, TypeError):
        return None


@pytest.mark.parametrize(
    "tail",
    [
        "files/../../../healthz",
        "files/%2e%2e/%2e%2e/%2e%2e/healthz",
        "info/..%2F..%2F..%2Fhealthz",
        "files\\..\\..\\..\\healthz",
        "files//../../../healthz",
    ],
)
async def test_dot_segments_never_reach_the_daemon(
    stack: RunningStack, sandbox: str, tail: str
) -> None:
    status, body = await _send(stack, "GET", f"/v1/sandboxes/{sandbox}/{tail}")
    assert body != HEALTHZ
    assert (status, _reason(body)) in ((400, "invalid_path"), (404, "not_found")), body


@settings(
    max_examples=80,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(request=st.one_of(daemon_call(), hostile_call()))
async def test_the_answer_is_the_checks_decision(
    stack: RunningStack, sandbox: str, request: tuple[str, str]
) -> None:
    method, generated = request
    parts = generated.split("/")  # the generated id (a disguise of "sb-1"): of our sandbox
    raw = "/".join([*parts[:3], parts[3].replace("sb-1", sandbox), *parts[4:]])
    status, body = await _send(stack, method, raw)
    assert status < 500, (method, raw, body)
    assert body != HEALTHZ and _reason(body) != "no_such_endpoint", (method, raw, body)
    try:
        proxied_call(method, raw)
    except FacadeError as e:
        refused: FacadeError | None = e
    else:
        refused = None
    answer = (status, _reason(body))
    if refused is not None and refused.status != 404:
        # Refused the same way, or before it by the router (no route for an empty id).
        assert answer in ((refused.status, refused.reason), (404, "not_found")), (raw, body)
    elif refused is not None:  # not_found, or a made-up sandbox id's sandbox_not_found
        assert status == 404, (method, raw, body)


@pytest.fixture(scope="module")
async def port(stack: RunningStack, sandbox: str) -> int:
    """The port server (tests/support/port_server.py) running in the module's sandbox."""
    chosen = free_listen_port()
    base = f"{stack.url}/v1/sandboxes/{sandbox}"
    headers = {"Authorization": f"Bearer {stack.token}"}
    async with aiohttp.ClientSession(headers=headers) as http:
        params = {"path": "/tmp/port_server.py"}
        async with http.put(f"{base}/files", params=params, data=SERVER.read_bytes()) as r:
            assert r.status == 200, await r.text()
        command = {"command": f"python3 /tmp/port_server.py {chosen} 127.0.0.1"}
        async with http.post(f"{base}/processes", json=command) as r:
            assert r.status == 201, await r.text()

    async def listening() -> bool:
        status, _ = await _send(stack, "GET", f"/v1/sandboxes/{sandbox}/ports/{chosen}/")
        return status == 200

    await wait_until_async(listening, timeout_s=30)
    return chosen


@settings(
    max_examples=80,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(request=port_request())
async def test_a_port_paths_answer_is_the_checks_decision(
    stack: RunningStack, sandbox: str, port: int, request: tuple[str, str]
) -> None:
    method, generated = request
    raw = generated.replace("sb-1", sandbox).format(port=port, daemon=DAEMON_PORT)
    status, body = await _send(stack, method, raw)
    assert status < 500, (method, raw, body)
    try:
        decided = port_call(URL(raw, encoded=True), reserved=DAEMON_PORT)
    except FacadeError as e:
        refused: FacadeError | None = e
    else:
        refused = None
    if refused is not None:
        assert (status, _reason(body)) == (refused.status, refused.reason), (raw, body)
        return
    assert status == 200, (method, raw, body)
    seen = json.loads(body)
    assert (seen["method"], seen["path"]) == (method, decided.target.target), raw


async def _parked(url: str, count: int) -> bool:
    """Whether ``count`` waits are parked in the facade at ``url`` (its metrics say)."""
    async with aiohttp.ClientSession() as http, http.get(f"{url}/metrics") as r:
        for line in (await r.text()).splitlines():
            if line.startswith("sandman_facade_waiters "):
                return float(line.split()[1]) == count
    return False


async def test_sigterm_ends_parked_waits_and_the_facade_quickly(
    stack: RunningStack, owner: str
) -> None:
    url = stack.urls[1]  # the second replica: the module's others keep the first
    headers = {"Authorization": f"Bearer {stack.token}"}
    async with aiohttp.ClientSession(url, headers=headers) as http:
        spec = {"image": IMAGE, "owner": owner, "class": "huge"}  # unschedulable: pending
        async with http.post("/v1/sandboxes", json=spec) as r:
            sid = (await r.json())["id"]

        async def wait() -> tuple[int, Any]:
            params = {"wait": "ready", "timeout_s": "600"}
            async with http.get(f"/v1/sandboxes/{sid}", params=params) as r:
                return r.status, await r.json()

        parked = [asyncio.create_task(wait()) for _ in range(2)]
        await wait_until_async(lambda: _parked(url, 2), timeout_s=10)
        process = stack.stack.processes["facade-2"]  # a child of the stack's event loop
        started = time.monotonic()
        os.kill(process.pid, signal.SIGTERM)
        answers = await asyncio.gather(*parked)
        await anyio.to_thread.run_sync(stack.portal.call, process.wait)
        took = time.monotonic() - started
    await stack.restart("facade-2")
    assert took < 5, f"the facade took {took:.1f} s to stop"
    assert process.returncode == 0
    for status, body in answers:
        assert (status, body["error"]["reason"]) == (503, "facade_stopping"), body
    async with (
        aiohttp.ClientSession(stack.url, headers=headers) as http,
        http.delete("/v1/sandboxes", params={"owner": owner}) as r,
    ):
        assert r.status == 202
