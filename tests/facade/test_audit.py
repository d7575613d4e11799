"""The audit log (facade/audit.py): a real facade's lines, read back from its file and parsed.

Sandboxes stay pending here (no nodes), so the lines of tool calls — the command logged,
bounded — are checked against real daemons in tests/e2e/test_fair_sharing.py; the command
rule itself over generated bodies below.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from facade.app import FacadeSettings
from facade.audit import AuditSettings, command_of
from simcluster.embedded import EmbeddedCluster
from tests.support.facade import NAMESPACE, LiveFacade, live_facade
from tests.support.kube import FAST

pytestmark = [pytest.mark.timeout(60)]
IMAGE = "registry.example/tasks/demo:1"
FIELDS = {
    "time", "request_id", "remote", "tenant", "owner", "sandboxes", "sandbox_count",
    "operation", "method", "status", "reason", "bytes_in", "bytes_out", "duration_ms",
}  # fmt: skip


@pytest.fixture
async def audited(cluster: EmbeddedCluster, tmp_path: Path) -> AsyncIterator[LiveFacade]:
    settings = FacadeSettings(port=0, client=FAST, audit=AuditSettings(file=str(_file(tmp_path))))
    async with live_facade(cluster.kubeconfig, settings, tmp_path) as running:
        yield running


def _file(tmp_path: Path) -> Path:
    return tmp_path / "audit.jsonl"


def _lines(tmp_path: Path) -> list[dict[str, Any]]:
    text = _file(tmp_path).read_text() if _file(tmp_path).exists() else ""
    return [json.loads(line) for line in text.splitlines()]


@pytest.mark.anyio
async def test_create_get_release_and_refusals_each_leave_one_line(
    audited: LiveFacade, tmp_path: Path
) -> None:
    http = audited.http
    body = {"image": IMAGE, "owner": "run-a", "env": {"SECRET": "hunter2"}}
    async with http.post("/v1/sandboxes", json=body, headers={"X-Request-Id": "req-1"}) as r:
        assert r.status == 201 and r.headers["X-Request-Id"] == "req-1"
        sid = (await r.json())["id"]
    async with http.get(f"/v1/sandboxes/{sid}") as r:
        assert r.status == 200
    async with http.get("/v1/sandboxes/nope") as r:
        assert r.status == 404
    async with http.delete(f"/v1/sandboxes/{sid}") as r:
        assert r.status == 202
    async with http.get("/v1/classes", headers={"Authorization": "Bearer wrong"}) as r:
        assert r.status == 401
    lines = _lines(tmp_path)  # each line is written before its answer is sent
    create, get, missing, release, denied = lines[-5:]
    assert all(set(line) == FIELDS for line in lines), lines
    assert create["request_id"] == "req-1" and create["remote"] == "127.0.0.1"
    assert (create["operation"], create["status"], create["tenant"]) == ("create", 201, "t1")
    assert (create["owner"], create["sandboxes"], create["sandbox_count"]) == ("run-a", [sid], 1)
    assert create["bytes_in"] == len(json.dumps(body)) and create["bytes_out"] > 0
    assert create["time"].endswith("Z") and create["duration_ms"] > 0
    assert (get["operation"], get["owner"], get["sandboxes"]) == ("get", "run-a", [sid])
    assert (missing["status"], missing["reason"], missing["sandboxes"]) == (
        404,
        "sandbox_not_found",
        ["nope"],
    )
    assert (release["operation"], release["status"], release["owner"]) == ("release", 202, "run-a")
    assert (denied["status"], denied["reason"], denied["tenant"]) == (401, "unauthenticated", None)
    assert denied["operation"] == "classes"
    text = _file(tmp_path).read_text()
    assert "hunter2" not in text and audited.token not in text and "wrong" not in text
    assert len({line["request_id"] for line in lines}) == len(lines)
    assert NAMESPACE not in text  # the tenant is named, its namespace is configuration


@pytest.mark.anyio
async def test_the_audit_log_can_be_switched_off(cluster: EmbeddedCluster, tmp_path: Path) -> None:
    audit = AuditSettings(enabled=False, file=str(_file(tmp_path)))
    settings = FacadeSettings(port=0, client=FAST, audit=audit)
    async with (
        live_facade(cluster.kubeconfig, settings, tmp_path) as running,
        running.http.get("/v1/classes") as r,
    ):
        assert r.status == 200
    assert _lines(tmp_path) == []


TEXT = st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=300)


@given(argv=st.lists(TEXT, min_size=1, max_size=8), limit=st.integers(1, 200), env=TEXT)
def test_the_logged_command_is_the_argv_bounded_and_nothing_else(
    argv: list[str], limit: int, env: str
) -> None:
    body = json.dumps({"argv": argv, "env": {"K": env}, "stdin": {"text": env}}).encode()
    command, truncated = command_of(body, limit)
    assert command is not None
    assert len(command.encode()) <= limit
    assert truncated == (len(shlex.join(argv).encode()) > limit)
    assert shlex.join(argv).startswith(command)


@given(text=TEXT, limit=st.integers(1, 400))
def test_a_command_text_is_cut_on_a_character_boundary(text: str, limit: int) -> None:
    command, truncated = command_of(json.dumps({"command": text}).encode(), limit)
    assert command is not None and text.startswith(command)
    assert (command == text) != truncated
    assert command_of(b"not json", limit) == (None, False)
    assert command_of(b'{"argv": [1]}', limit) == (None, False)
