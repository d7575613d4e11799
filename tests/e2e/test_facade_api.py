"""The facade's HTTP API end to end: trainer → facade → simcluster → controller → daemon."""

from __future__ import annotations

import io
import json
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest

from load.faults.cluster import daemon_processes
from tests.support.kubectl import Kubectl
from tests.support.stack import RunningStack as Stack
from tests.support.wait import wait_until_async

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
    async def none_listed() -> bool:
        async with http.get("/v1/sandboxes", params={"owner": owner}) as r:
            items = (await _json(r))["items"]
        assert not items, f"still listed after release: {[i['id'] for i in items]}"
        return True

    await wait_until_async(none_listed, timeout_s=timeout_s, interval_s=0.2)


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
        ("POST", "/v1/sandboxes", {"image": IMAGE, "owner": "o", "class": "colossal"}, 400,
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


async def test_facade_restart_loses_nothing(
    http: aiohttp.ClientSession, stack: Stack, owner: str
) -> None:
    spec = {"image": IMAGE, "owner": owner}
    async with http.post("/v1/batches", json={"spec": spec, "count": 3}) as r:
        ids = [s["id"] for s in (await _json(r))["sandboxes"]]
    for sid in ids:
        async with http.get(f"/v1/sandboxes/{sid}", params={"wait": "ready"}) as r:
            assert (await _json(r))["state"] == "ready"
    async with http.post(
        f"/v1/sandboxes/{ids[0]}/exec", json={"command": "echo kept > /tmp/k"}
    ) as r:
        assert (await _json(r))["exit_code"] == 0
    await stack.restart("facade")
    async with http.get("/v1/sandboxes", params={"owner": owner}) as r:
        assert sorted(s["id"] for s in (await _json(r))["items"]) == sorted(ids)
    async with http.get(f"/v1/sandboxes/{ids[0]}/files", params={"path": "/tmp/k"}) as r:
        assert await r.read() == b"kept\n"  # the same sandbox, its files intact
    await _release_owner(http, owner)
    await _gone(http, owner)


async def test_another_tenants_sandbox_is_a_404(
    http: aiohttp.ClientSession, stack: Stack, owner: str
) -> None:
    async with http.post("/v1/sandboxes", json={"image": IMAGE, "owner": owner}) as r:
        sid = (await _json(r))["id"]
    other = {"Authorization": f"Bearer {stack.tokens['other']}"}
    async with aiohttp.ClientSession(stack.url, headers=other) as intruder:
        for method, path in (
            ("GET", f"/v1/sandboxes/{sid}"),
            ("DELETE", f"/v1/sandboxes/{sid}"),
            ("POST", f"/v1/sandboxes/{sid}/exec"),
        ):
            async with intruder.request(method, path, json={"command": "id"}) as r:
                assert r.status == 404, (method, path, await r.text())
        async with intruder.get("/v1/sandboxes", params={"owner": owner}) as r:
            assert (await _json(r))["items"] == []
    async with http.get(f"/v1/sandboxes/{sid}") as r:
        assert r.status == 200
    await _release_owner(http, owner)
    await _gone(http, owner)


async def test_resource_quota_is_the_backstop(stack: Stack, owner: str) -> None:
    """The namespace's ResourceQuota (pods: 3) refuses what the facade's own limit allows."""
    headers = {"Authorization": f"Bearer {stack.tokens['other']}"}
    async with aiohttp.ClientSession(stack.url, headers=headers) as other:
        batch = {"spec": {"image": IMAGE, "owner": owner}, "count": 5}
        async with other.post("/v1/batches", json=batch) as r:
            body = await _json(r)
        assert len(body["sandboxes"]) == 3
        assert [f["reason"] for f in body["failed"]] == ["quota_exceeded"] * 2
        async with other.post("/v1/sandboxes", json=batch["spec"]) as r:
            assert r.status == 429 and (await _json(r))["error"]["reason"] == "quota_exceeded"
        await _release_owner(other, owner)
        await _gone(other, owner)


def _kill_daemon(stack: Stack, sandbox_id: str) -> None:
    """SIGKILL the sandbox's daemon from the host, as a crash would end it (from inside the
    sandbox it is PID 1 of its PID namespace, which ignores a SIGKILL sent from there, as a
    container's init does)."""
    pod = json.loads(
        Kubectl(stack.stack.kubeconfig)
        .run("-n", stack.stack.namespace(), "get", "pod", sandbox_id, "-o", "json")
        .stdout
    )
    ip = pod["status"]["podIP"]
    procs = daemon_processes(stack.stack.processes["simcluster"].pid, {ip})
    assert ip in procs, f"no daemon process listens on {ip}"
    procs[ip].kill()


async def test_failures_are_typed(stack: Stack, http: aiohttp.ClientSession, owner: str) -> None:
    created = {}
    for name, spec in (
        ("huge", {"image": IMAGE, "owner": owner, "class": "huge"}),
        ("ghost", {"image": "registry.invalid/none:1", "owner": owner}),
        ("victim", {"image": IMAGE, "owner": owner}),
    ):
        async with http.post("/v1/sandboxes", json=spec) as r:
            created[name] = (await _json(r))["id"]
    wait = {"wait": "ready", "timeout_s": "8"}
    async with http.get(f"/v1/sandboxes/{created['huge']}", params=wait) as r:
        huge = await _json(r)
    assert (huge["state"], huge["reason"]) == ("pending", "unschedulable"), huge
    assert "Insufficient cpu" in huge["message"]
    async with http.get(f"/v1/sandboxes/{created['ghost']}", params=wait) as r:
        ghost = await _json(r)
    assert (ghost["state"], ghost["reason"]) == ("failed", "image_pull_failed"), ghost
    victim = created["victim"]
    async with http.get(f"/v1/sandboxes/{victim}", params=wait) as r:
        assert (await _json(r))["state"] == "ready"
    async with http.get(f"/v1/sandboxes/{victim}/info") as r:
        assert (await _json(r))["pid"] == 1  # the daemon is the sandbox's PID 1
    async with http.post(f"/v1/sandboxes/{victim}/exec", json={"command": "kill -9 1"}) as r:
        # From inside, PID 1 of the namespace ignores the SIGKILL, as a container's init does.
        assert r.status == 200, await r.text()
    _kill_daemon(stack, victim)
    async with http.get(f"/v1/sandboxes/{victim}", params={**wait, "wait": "final"}) as r:
        dead = await _json(r)
    assert (dead["state"], dead["reason"]) == ("terminated", "sandbox_failed"), dead
    async with http.post(f"/v1/sandboxes/{victim}/exec", json={"command": "true"}) as r:
        assert r.status == 410 and (await _json(r))["error"]["reason"] == "sandbox_terminated"
    await _release_owner(http, owner)
    await _gone(http, owner)


async def test_streaming_exec_and_background_process_through_the_facade(
    http: aiohttp.ClientSession, owner: str
) -> None:
    async with http.post("/v1/sandboxes", json={"image": IMAGE, "owner": owner}) as r:
        sid = (await _json(r))["id"]
    async with http.get(f"/v1/sandboxes/{sid}", params={"wait": "ready"}) as r:
        assert (await _json(r))["state"] == "ready"
    body = {"command": "for i in 1 2 3; do echo line$i; sleep 0.05; done"}
    async with http.post(f"/v1/sandboxes/{sid}/exec/stream", json=body) as r:
        assert r.headers["Content-Type"].startswith("application/x-ndjson"), await r.text()
        lines = [json.loads(line) async for line in r.content if line.strip()]
    assert "".join(e.get("data", "") for e in lines if e["event"] == "stdout") == (
        "line1\nline2\nline3\n"
    )
    assert lines[-1]["event"] == "exit" and lines[-1]["result"]["exit_code"] == 0
    proc = {"command": "echo started; sleep 30", "name": "srv"}
    async with http.post(f"/v1/sandboxes/{sid}/processes", json=proc) as r:
        assert r.status in (200, 201), await r.text()
        pid = (await _json(r))["id"]
    signal = {"signal": "TERM"}
    async with http.post(f"/v1/sandboxes/{sid}/processes/{pid}/signal", json=signal) as r:
        assert r.status == 200, await r.text()
    async with http.post(f"/v1/sandboxes/{sid}/processes/{pid}/wait", json={"timeout_s": 5}) as r:
        assert (await _json(r))["running"] is False
    await _release_owner(http, owner)
    await _gone(http, owner)


async def test_an_owner_whose_lease_lapses_loses_its_sandboxes(
    http: aiohttp.ClientSession, owner: str
) -> None:
    async with http.put(f"/v1/owners/{owner}/lease", json={"duration_s": 5}) as r:
        assert r.status == 200 and (await _json(r))["duration_s"] == 5
    async with http.post("/v1/batches", json={"spec": {"image": IMAGE, "owner": owner},
                                              "count": 2}) as r:  # fmt: skip
        ids = [s["id"] for s in (await _json(r))["sandboxes"]]
    async with http.put(f"/v1/owners/{owner}/lease", json={"duration_s": 5}) as r:
        assert r.status == 200  # a renewal is one patch
    # No more renewals: after 5 s the controller's collector deletes the owner's sandboxes.
    params = {"wait": "final", "timeout_s": "30"}
    for sid in ids:
        async with http.get(f"/v1/sandboxes/{sid}", params=params) as r:
            final = await _json(r)
        assert final["state"] in ("releasing", "terminated", "failed"), final
    await _gone(http, owner, timeout_s=30)

    # The reason comes from the collector's Event, which may reach the facade's watch after
    # the pods have gone (docs/facade.md): until then the tombstone says plain ``deleted``.
    async def reason_settled() -> dict[str, Any] | None:
        async with http.get(f"/v1/sandboxes/{ids[0]}") as r:
            gone = await _json(r)
        return gone if gone["reason"] != "deleted" else None

    gone = await wait_until_async(reason_settled, timeout_s=15, interval_s=0.2)
    assert (gone["state"], gone["reason"]) in {
        ("terminated", "owner_expired"),
        ("failed", "owner_expired"),
    }, gone


async def test_replicas_are_interchangeable(stack: Stack, owner: str) -> None:
    """Created through one facade replica, used and released through another."""
    headers = {"Authorization": f"Bearer {stack.token}"}
    first, second = stack.urls
    async with (
        aiohttp.ClientSession(first, headers=headers) as a,
        aiohttp.ClientSession(second, headers=headers) as b,
    ):
        async with a.post("/v1/sandboxes", json={"image": IMAGE, "owner": owner}) as r:
            sid = (await _json(r))["id"]
        async with b.get(f"/v1/sandboxes/{sid}", params={"wait": "ready"}) as r:
            assert (await _json(r))["state"] == "ready"
        async with b.post(f"/v1/sandboxes/{sid}/exec", json={"command": "echo via-b"}) as r:
            assert (await _json(r))["stdout"]["data"] == "via-b\n"  # same derived token
        async with b.delete(f"/v1/sandboxes/{sid}") as r:
            assert r.status == 202
        await _gone(a, owner)
