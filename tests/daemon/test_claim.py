"""A pool sandbox's claim (daemon/sandbox/claim.py), against a real daemon process: pristine
before it (nothing but the claim is served), claimed once (a repeat of the same claim is
accepted, any other refused), and afterwards it behaves as a cold sandbox with the claim's
env, idle timeout and token — the pool token opens nothing any more."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from daemon.sandbox import api
from facade.paths import OPERATIONS
from sandman.wire.errors import Reason
from tests.support.daemon import DaemonProcess, start_daemon
from tests.support.wait import wait_until

pytestmark = pytest.mark.anyio


@pytest.fixture
def pool_daemon(tmp_path: Path) -> Iterator[DaemonProcess]:
    process = start_daemon(["--pooled"], cwd=str(tmp_path))
    try:
        yield process
    finally:
        process.stop()


async def _call(
    daemon: DaemonProcess, method: str, path: str, token: str, body: Any = None
) -> tuple[int, Any]:
    async with aiohttp.ClientSession() as session:
        headers = {"Authorization": f"Bearer {token}"}
        async with session.request(method, daemon.url + path, json=body, headers=headers) as r:
            data = await r.json() if r.content_type == "application/json" else None
            return r.status, data


def _claim(name: str = "claim-a", token: str = "", **fields: Any) -> dict[str, Any]:
    return {"claim": name, "token": token or secrets.token_hex(16), **fields}


def _reason(data: Any) -> str:
    return str(data["error"]["reason"])


async def test_a_pool_sandbox_runs_nothing_before_its_claim(pool_daemon: DaemonProcess) -> None:
    pool = pool_daemon.token
    for method, path, body in (
        ("POST", "/v1/exec", {"command": "touch /tmp/ran"}),
        ("GET", "/v1/info", None),
        ("POST", "/v1/sessions", {"name": "s"}),
        ("POST", "/v1/processes", {"command": "true"}),
        ("GET", "/v1/files/list?path=.", None),
    ):
        status, data = await _call(pool_daemon, method, path, pool, body)
        assert (status, _reason(data)) == (409, Reason.SANDBOX_UNCLAIMED), path
        status, data = await _call(pool_daemon, method, path, "x" * 32, body)
        assert (status, _reason(data)) == (401, Reason.INVALID_TOKEN), path


async def test_the_claim_gives_its_env_token_and_the_pool_token_opens_nothing(
    pool_daemon: DaemonProcess,
) -> None:
    pool, own = pool_daemon.token, secrets.token_hex(16)
    claim = _claim(token=own, env={"TASK": "django-123"})
    assert (await _call(pool_daemon, "POST", "/v1/claim", pool, claim))[0] == 204
    status, data = await _call(pool_daemon, "POST", "/v1/exec", own, {"command": "echo $TASK"})
    assert status == 200 and data["stdout"]["data"] == "django-123\n"
    session = {"name": "s"}
    assert (await _call(pool_daemon, "POST", "/v1/sessions", own, session))[0] == 201
    run = {"command": "echo $TASK"}
    status, data = await _call(pool_daemon, "POST", "/v1/sessions/s/run", own, run)
    assert status == 200 and "django-123" in data["output"]["data"]
    status, data = await _call(pool_daemon, "POST", "/v1/exec", pool, {"command": "true"})
    assert (status, _reason(data)) == (401, Reason.INVALID_TOKEN)


async def test_a_pool_sandbox_is_claimed_once(pool_daemon: DaemonProcess) -> None:
    pool, own = pool_daemon.token, secrets.token_hex(16)
    first = _claim("claim-a", own, env={"A": "1"})
    assert (await _call(pool_daemon, "POST", "/v1/claim", pool, first))[0] == 204
    # The facade lost the answer and repeats: the same claim is accepted again.
    assert (await _call(pool_daemon, "POST", "/v1/claim", pool, first))[0] == 204
    for other in (_claim("claim-b", own), _claim("claim-a", secrets.token_hex(16))):
        status, data = await _call(pool_daemon, "POST", "/v1/claim", pool, other)
        assert (status, _reason(data)) == (409, Reason.ALREADY_CLAIMED)
    status, data = await _call(pool_daemon, "POST", "/v1/exec", own, {"command": "echo $A"})
    assert data["stdout"]["data"] == "1\n"


async def test_a_bad_claim_leaves_the_sandbox_unclaimed(pool_daemon: DaemonProcess) -> None:
    pool = pool_daemon.token
    bad = _claim(env={"A=B": "1"})
    status, data = await _call(pool_daemon, "POST", "/v1/claim", pool, bad)
    assert (status, _reason(data)) == (400, Reason.INVALID_ENV)
    status, data = await _call(pool_daemon, "POST", "/v1/claim", "y" * 32, _claim())
    assert (status, _reason(data)) == (401, Reason.INVALID_TOKEN)
    status, data = await _call(pool_daemon, "GET", "/v1/info", pool)
    assert (status, _reason(data)) == (409, Reason.SANDBOX_UNCLAIMED)
    assert (await _call(pool_daemon, "POST", "/v1/claim", pool, _claim()))[0] == 204


async def test_a_cold_sandbox_refuses_every_claim(daemon: DaemonProcess) -> None:
    status, data = await _call(daemon, "POST", "/v1/claim", daemon.token, _claim())
    assert (status, _reason(data)) == (409, Reason.ALREADY_CLAIMED)


async def test_the_claims_idle_timeout_counts_from_the_claim(pool_daemon: DaemonProcess) -> None:
    own = secrets.token_hex(16)
    claim = _claim(token=own, idle_timeout_s=0.5)
    assert (await _call(pool_daemon, "POST", "/v1/claim", pool_daemon.token, claim))[0] == 204
    status, data = await _call(pool_daemon, "GET", "/v1/info", own)
    assert status == 200 and data["idle_timeout_s"] == 0.5
    assert wait_until(lambda: pool_daemon.proc.poll() is not None, timeout_s=15) is not None
    assert pool_daemon.proc.returncode == 0


async def test_the_facade_never_forwards_a_claim() -> None:
    assert not any(p.fullmatch(api.CLAIM.path) for _m, p, _op in OPERATIONS)
    assert api.CLAIM in api.ROUTES
