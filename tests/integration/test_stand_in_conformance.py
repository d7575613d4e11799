"""simcluster's stand-in daemon (``nodes.virtual_daemon``) held to the real sandbox daemon:
one conversation — health, missing and wrong tokens, tool calls before and after the claim,
malformed claims, the claim, its repeat, another claim — sent to both, answered with the same
statuses, reasons and ``www-authenticate``; only a tool call the real daemon runs is a 501
``not_simulated`` at the stand-in. simcluster imports nothing of Sandman, so its route table,
env names and reason statuses are checked against the daemon's own here."""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator, Iterator

import httpx
import pytest

from daemon.sandbox import api
from daemon.sandbox.layout import token_digest
from daemon.sandbox.settings import DaemonSettings
from devstack.launcher import LocalDaemon
from sandman.base.settings import env_of
from sandman.wire.errors import Reason
from simcluster.kubelet import stand_in
from simcluster.kubelet.runtime import Container, Probe, Sandbox
from simcluster.kubelet.stand_in import StandInRuntime
from tests.support.daemon import start_daemon

CLAIM_TOKEN = "claim-token-0123456789abcdef"
EXEC = {"argv": ["true"]}
Step = tuple[str, str, str | None, object]  # method, path, token (None: none; "pool"), body


def _conversation(pool: str) -> list[Step]:
    good = {"claim": "claim-1", "token": CLAIM_TOKEN, "env": {"TASK": "1"}}
    return [
        ("GET", "/healthz", None, None),
        ("POST", "/v1/exec", None, EXEC),
        ("POST", "/v1/exec", "wrong-token-0123456789", EXEC),
        ("POST", "/v1/exec", pool, EXEC),
        ("GET", "/no/such/path", pool, None),
        ("GET", "/v1/ports/8080/index.html", pool, None),
        ("GET", "/v1/claim", pool, None),
        ("POST", "/v1/claim", "wrong-token-0123456789", good),
        ("POST", "/v1/claim", pool, b"{not json"),
        ("POST", "/v1/claim", pool, {"claim": "claim-1"}),
        ("POST", "/v1/claim", pool, {**good, "token": "short"}),
        ("POST", "/v1/claim", pool, {**good, "claim": "-bad name"}),
        ("POST", "/v1/claim", pool, {**good, "surplus": 1}),
        ("POST", "/v1/claim", pool, {**good, "idle_timeout_s": 0}),
        ("POST", "/v1/claim", pool, {**good, "env": {"A=B": "x"}}),
        ("POST", "/v1/claim", pool, good),
        ("POST", "/v1/claim", pool, good),
        ("POST", "/v1/claim", pool, {**good, "claim": "claim-2"}),
        ("POST", "/v1/claim", pool, {**good, "token": "another-token-0123456789"}),
        ("POST", "/v1/exec", pool, EXEC),
        ("GET", "/no/such/path", CLAIM_TOKEN, None),
        ("DELETE", "/v1/info", CLAIM_TOKEN, None),
    ]


async def _answers(url: str, steps: list[Step]) -> list[tuple[int, str | None, str | None]]:
    out = []
    async with httpx.AsyncClient(base_url=url, timeout=10) as http:
        for method, path, token, body in steps:
            headers = {"authorization": f"Bearer {token}"} if token else {}
            content = body if isinstance(body, bytes) else None
            json = None if isinstance(body, bytes) or body is None else body
            r = await http.request(method, path, headers=headers, content=content, json=json)
            reason = r.json()["error"]["reason"] if r.status_code >= 400 else None
            out.append((r.status_code, reason, r.headers.get("www-authenticate")))
    return out


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def _stand_in(env: dict[str, str]) -> AsyncIterator[str]:
    port = _free_port()
    probe = Probe("/healthz", port)
    sandbox = Sandbox(
        "uid-1", "default", "pod", "127.0.0.1", (Container("c", "i", (), env, probe),)
    )
    runtime = StandInRuntime()
    await runtime.start(sandbox)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        await runtime.close()


@pytest.fixture
def pooled_daemon() -> Iterator[LocalDaemon]:
    daemon = start_daemon(["--pooled"], verifier_only=True)
    yield daemon
    daemon.stop()


@pytest.mark.anyio
async def test_the_stand_in_answers_a_claim_conversation_as_the_daemon_does(
    pooled_daemon: LocalDaemon,
) -> None:
    steps = _conversation(pooled_daemon.token)
    real = await _answers(pooled_daemon.url, steps)
    env = {"SANDMAN_TOKEN_SHA256": token_digest(pooled_daemon.token).hex(), "SANDMAN_POOLED": "1"}
    async for url in _stand_in(env):
        simulated = await _answers(url, steps)
    assert simulated == real
    reasons = {reason for _, reason, _ in real}
    assert reasons >= {
        "missing_token", "invalid_token", "sandbox_unclaimed", "method_not_allowed",
        "no_such_endpoint", "invalid_json", "invalid_request", "invalid_env", "already_claimed",
    }  # fmt: skip
    assert [status for status, _, _ in real].count(204) == 2
    exec_after = [("POST", "/v1/exec", CLAIM_TOKEN, EXEC)]
    assert (await _answers(pooled_daemon.url, exec_after))[0][0] == 200
    async for url in _stand_in(env):
        await _answers(url, steps)
        assert await _answers(url, exec_after) == [(501, "not_simulated", None)]
        port_after = [("POST", "/v1/ports/8080/x", CLAIM_TOKEN, b"")]
        assert await _answers(url, port_after) == [(501, "not_simulated", None)]


@pytest.mark.anyio
async def test_a_cold_daemon_refuses_every_claim_as_the_stand_in_does() -> None:
    daemon = start_daemon(verifier_only=True)
    try:
        claim = {"claim": "claim-1", "token": CLAIM_TOKEN}
        steps: list[Step] = [
            ("POST", "/v1/claim", daemon.token, claim),
            ("POST", "/v1/claim", "wrong-token-0123456789", claim),
            ("GET", "/v1/nothing", daemon.token, None),
        ]
        real = await _answers(daemon.url, steps)
        async for url in _stand_in({"SANDMAN_TOKEN_SHA256": token_digest(daemon.token).hex()}):
            assert await _answers(url, steps) == real
    finally:
        daemon.stop()


def test_the_stand_in_shares_the_daemon_route_table_env_names_and_reason_statuses() -> None:
    assert tuple((r.method, r.path) for r in api.ROUTES) == stand_in.DAEMON_ROUTES
    assert (api.CLAIM.method, api.CLAIM.path) == stand_in.CLAIM
    names = {n: env_of(DaemonSettings, n) for n in ("token", "token_sha256", "pooled")}
    assert names == {
        "token": stand_in.ENV_TOKEN,
        "token_sha256": stand_in.ENV_VERIFIER,
        "pooled": stand_in.ENV_POOLED,
    }
    statuses = {r.value: r.status for r in Reason}
    ours = {k: v for k, v in stand_in.REASON_STATUS.items() if k != "not_simulated"}
    assert {k: statuses[k] for k in ours} == ours
