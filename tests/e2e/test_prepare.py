"""Trainer-announced preparation end to end: SDK/CLI → facade ``POST /v1/prepare`` → an
``ImagePreparation`` in the tenant's namespace → the real controller plans → the node agents
(one per simulated node, against simcluster's CRI) pull → progress back through
``GET /v1/prepare/{id}`` and ``wait_ready``.

Also: the announcement is per tenant (another tenant's id is a 404), idempotent with a key,
and bad input is a 400 with a reason — for hand-picked cases and for generated bodies."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kube import LEASES, PODS, KubeClient
from kube.preparation_contract import (
    AGENT_LEASE_NAMESPACE,
    ANNOTATION_READY,
    IMAGE_PREPARATIONS,
    LABEL_NODE_AGENT,
    decode_images,
)
from sandman import AsyncSandman, Conflict, NotFound, PreparationTimeout, Sandman
from sandman.cli import main as cli_main
from tests.support.kube import FAST
from tests.support.stack import RunningStack as Stack
from tests.support.wait import wait_until_async

pytestmark = pytest.mark.timeout(120)
STACK = {"node_agents": True}


@pytest.fixture
async def kube(stack: Stack) -> AsyncIterator[KubeClient]:
    async with await KubeClient.connect(FAST, kubeconfig=str(stack.stack.kubeconfig)) as client:
        yield client


async def _holders(kube: KubeClient, image: str) -> set[str]:
    """Nodes whose agent publishes ``image`` as ready."""
    selector = f"{LABEL_NODE_AGENT}=true"
    leases = await kube.list(LEASES, AGENT_LEASE_NAMESPACE, label_selector=selector)
    return {
        lease["spec"]["holderIdentity"]
        for lease in leases["items"]
        if image
        in decode_images((lease["metadata"].get("annotations") or {}).get(ANNOTATION_READY))
    }


@pytest.mark.anyio
async def test_announced_images_get_ready_and_sandboxes_land_on_them(
    stack: Stack, kube: KubeClient, owner: str
) -> None:
    a, b = f"registry.example/prep/{owner}-a:1", f"registry.example/prep/{owner}-b:1"
    async with AsyncSandman(stack.url, stack.token, owner=owner) as client:
        prep = await client.prepare({a: 8, b: 2})
        assert prep.view.phase in ("Pending", "Preparing") and prep.view.sandboxes_expected == 10
        await prep.wait_ready(1.0, timeout_s=60, poll_s=0.5)
        view = await prep.refresh()
        assert view.phase == "Ready" and view.eta_s == 0.0, view
        by_image = {i.image: i for i in view.images}
        assert by_image[a].nodes_wanted == 2 and by_image[b].nodes_wanted == 1  # cap 5
        assert all(i.nodes_ready >= i.nodes_wanted for i in view.images), view
        holders = await _holders(kube, a)
        assert len(holders) >= 2
        # The object is the tenant's, labelled with the run; the controller acts on it.
        obj = await kube.get(IMAGE_PREPARATIONS, prep.id, "sandman-dev")
        assert obj["metadata"]["labels"]["sandman.io/owner"] == owner
        assert obj["spec"]["expiresAt"]
        # Sandboxes of the announced image start where it already is (no pull). The spread
        # (rule 7) may make more nodes hold it meanwhile: compare with the holders after.
        sandboxes = await client.create_many(4, a, timeout_s=60)
        assert {s.view.node for s in sandboxes} <= await _holders(kube, a)
        again = await client.get_preparation(prep.id)
        assert again.id == prep.id and again.view.phase == "Ready"


@pytest.mark.anyio
async def test_announced_sandboxes_are_created_ahead_and_released_with_the_owner(
    stack: Stack, kube: KubeClient, owner: str
) -> None:
    """``sandboxes=True`` through the SDK: the controller's pool filler creates the pool from
    the template the facade rendered (the real stack: Pod Security, RBAC, placements), the
    counts come back through ``GET /v1/prepare/{id}``, and releasing the owner deletes the
    announcement and with it every unclaimed pool pod."""
    a, b = f"registry.example/pool/{owner}-a:1", f"registry.example/pool/{owner}-b:1"
    async with AsyncSandman(stack.url, stack.token, owner=owner) as client:
        prep = await client.prepare([(a, 3), (b, 2)], sandboxes=True, class_="tiny")
        assert (prep.view.sandboxes, prep.view.sandbox_class) == (True, "tiny")

        async def pool_ready() -> Any:
            view = await prep.refresh()
            return view.pool if view.pool is not None and view.pool.ready == 5 else None

        pool = await wait_until_async(pool_ready, timeout_s=60)
        assert (pool.wanted, pool.created, pool.claimed) == (5, 5, 0)
        selector = f"sandman.io/pool={prep.id}"
        pods = (await kube.list(PODS, "sandman-dev", label_selector=selector))["items"]
        assert sorted(p["spec"]["containers"][0]["image"] for p in pods) == [a, a, a, b, b]
        assert all(p["spec"].get("nodeName") for p in pods)
        await client.release_owner()

        async def gone() -> bool:
            left = (await kube.list(PODS, "sandman-dev", label_selector=selector))["items"]
            return not [p for p in left if not p["metadata"].get("deletionTimestamp")]

        await wait_until_async(gone, timeout_s=30)


@pytest.mark.anyio
async def test_announced_sandboxes_are_claimed_by_the_next_steps_creates(
    stack: Stack, kube: KubeClient, owner: str
) -> None:
    """The whole pooled path on the real stack: an announcement's pool, filled by the
    controller, is what ``create_many`` of that image and class gets — ready in the answer,
    with the request's env, the rest created cold — and the pool's status counts the claim."""
    image = f"registry.example/pool/{owner}-next:1"
    async with AsyncSandman(stack.url, stack.token, owner=owner) as client:
        prep = await client.prepare([(image, 3)], sandboxes=True, class_="tiny")

        async def pool_ready() -> Any:
            view = await prep.refresh()
            return view.pool if view.pool is not None and view.pool.ready == 3 else None

        await wait_until_async(pool_ready, timeout_s=60)
        selector = f"sandman.io/pool={prep.id}"
        pooled = {
            p["metadata"]["name"]
            for p in (await kube.list(PODS, "sandman-dev", label_selector=selector))["items"]
        }
        sandboxes = await client.create_many(
            4, image, sandbox_class="tiny", env={"STEP": "7"}, timeout_s=60
        )
        ids = [s.id for s in sandboxes]
        assert set(ids[:3]) == pooled and ids[3] not in pooled  # the pool first, then cold
        for sandbox in sandboxes:
            assert (await sandbox.exec("echo $STEP")).stdout.strip() == "7"

        async def counted() -> Any:
            view = await prep.refresh()
            return view.pool if view.pool is not None and view.pool.claimed == 3 else None

        pool = await wait_until_async(counted, timeout_s=30)
        assert pool.ready == 0
        await client.release_owner()


@pytest.mark.anyio
async def test_per_tenant_and_idempotent(stack: Stack, owner: str) -> None:
    image = f"registry.example/prep/{owner}:1"
    async with AsyncSandman(stack.url, stack.token, owner=owner, lease_s=None) as client:
        first = await client.prepare({image: 1}, idempotency_key=f"{owner}-k")
        replay = await client.prepare({image: 1}, idempotency_key=f"{owner}-k")
        assert replay.id == first.id
        with pytest.raises(Conflict) as info:
            await client.prepare({image: 2}, idempotency_key=f"{owner}-k")
        assert info.value.reason == "idempotency_key_reused"
    other = AsyncSandman(stack.url, stack.tokens["other"], owner=owner, lease_s=None)
    async with other:
        with pytest.raises(NotFound) as missing:
            await other.get_preparation(first.id)
        assert missing.value.reason == "preparation_not_found"


def test_blocking_twin_and_timeout(stack: Stack, owner: str) -> None:
    # An image no node can be planned for before the timeout: 0.05 s is shorter than one
    # controller decision, so the wait times out and says how far it got.
    with Sandman(stack.url, stack.token, owner=owner, lease_s=None) as client:
        prep = client.prepare({f"registry.example/prep/{owner}-slow:1": 3})
        with pytest.raises(PreparationTimeout):
            prep.wait_ready(1.0, timeout_s=0.05, poll_s=0.01)
        assert prep.wait_ready(1.0, timeout_s=60, poll_s=0.5).view.phase == "Ready"


def test_cli_prepare(stack: Stack, owner: str, capsys: pytest.CaptureFixture[str]) -> None:
    conn = ["--url", stack.url, f"--token={stack.token}"]
    image = f"registry.example/prep/{owner}-cli:1"
    argv = ["prepare", *conn, f"{image}=3", "--wait", "1", "--timeout-s", "60"]
    assert cli_main(argv) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("prep-") and out[1].startswith("Ready 100% of 3 sandboxes")
    assert cli_main(["prepare", *conn, "--status", out[0]]) == 0
    # 1 node wanted for 3 sandboxes; the spread plans up to 3, ready one by one
    assert re.search(rf"{re.escape(image)}: [1-3]/1 nodes, [1-3] planned", capsys.readouterr().out)
    with pytest.raises(SystemExit, match="invalid_image_count"):
        cli_main(["prepare", *conn, f"{image}=many"])


@pytest.mark.anyio
async def test_cli_prepare_sandboxes(
    stack: Stack, kube: KubeClient, owner: str, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    """``sandman prepare --sandboxes --class``: the pool line, then the owner's release
    deletes the pool (waited for: its sandboxes are processes the leak check counts)."""
    monkeypatch.setenv("SANDMAN_OWNER", owner)  # the CLI's owner: the announcement's label
    conn = ["--url", stack.url, f"--token={stack.token}"]
    argv = ["prepare", *conn, f"registry.example/pool/{owner}-cli:1=2", "--sandboxes",
            "--class", "tiny"]  # fmt: skip
    assert await asyncio.to_thread(cli_main, argv) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("prep-")
    assert re.fullmatch(r"  pool \(tiny\): 2 wanted, \d created, \d ready, 0 claimed", out[2])
    assert await asyncio.to_thread(cli_main, ["rm", *conn, "--owner", owner]) == 0
    selector = f"sandman.io/pool={out[0]}"

    async def gone() -> bool:
        return not (await kube.list(PODS, "sandman-dev", label_selector=selector))["items"]

    await wait_until_async(gone, timeout_s=30)


BAD = [
    ({}, "invalid_request"),
    ({"images": []}, "invalid_request"),
    ({"images": [{"image": "x:1", "count": 0}]}, "invalid_request"),
    ({"images": [{"image": "x:1", "count": 10**6}]}, "invalid_request"),
    ({"images": [{"image": ""}]}, "invalid_image"),
    ({"images": [{"image": "x:1"}], "ttl_s": 5}, "invalid_request"),
    ({"images": [{"image": "x:1"}], "deadline": "2026-12-01T10:00:00"}, "invalid_request"),
    ({"images": [{"image": "x:1"}], "deadline": "tomorrow"}, "invalid_request"),
    ({"images": [{"image": "x:1"}], "colour": "red"}, "invalid_request"),
    ({"images": [{"image": "x:1"}, {"image": "x:1"}]}, "duplicate_image"),
    ({"images": [{"image": "x :1"}]}, "invalid_image"),
]


@pytest.mark.anyio
async def test_bad_input_is_400_with_a_reason(stack: Stack) -> None:
    headers = {"Authorization": f"Bearer {stack.token}"}
    async with aiohttp.ClientSession(stack.url, headers=headers) as http:
        for body, reason in BAD:
            async with http.post("/v1/prepare", json=body) as r:
                answer = await r.json(content_type=None)
            assert (r.status, answer["error"]["reason"]) == (400, reason), body
        async with http.post("/v1/prepare", data=b"{not json") as r:
            assert r.status == 400 and (await r.json())["error"]["reason"] == "invalid_json"
        # The answer is spelled like the rest of the facade's API (snake_case), images too.
        async with http.post("/v1/prepare", json={"images": [{"image": "x:1"}]}) as r:
            assert r.status == 201
            pid = (await r.json())["id"]

        async def progress() -> Any:
            async with http.get(f"/v1/prepare/{pid}") as r:
                answer = await r.json()
            return answer if answer["images"] else None

        answer = await wait_until_async(progress, timeout_s=30, interval_s=0.5)
        assert {"sandboxes_expected", "eta_s", "created_at", "expires_at"} <= set(answer)
        assert {"nodes_wanted", "nodes_ready", "sandboxes_ready"} <= set(answer["images"][0])
        for pid in ("prep-0000", "sb-123", "..", "prep-" + "x" * 300):
            async with http.get(f"/v1/prepare/{pid}") as r:
                assert r.status == 404, (pid, await r.text())
        anonymous = aiohttp.ClientSession(stack.url)
        async with anonymous, anonymous.post("/v1/prepare", json={"images": []}) as r:
            assert r.status == 401


_json = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**40), 2**40) | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=8,
)
_item = st.fixed_dictionaries(
    {"image": st.text(max_size=12) | st.integers()},
    optional={"count": st.integers(-2, 200_000) | st.text(max_size=3), "x": _json},
)
_body = st.fixed_dictionaries(
    {},
    optional={
        "images": st.lists(_item, max_size=4) | _json,
        "deadline": st.sampled_from(["2030-01-01T00:00:00Z", "2030-01-01", "", "x"]) | _json,
        "ttl_s": st.integers(-10, 10**7) | _json,
        "owner": st.text(max_size=70) | _json,
    },
)


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(body=_body)
def test_generated_bodies_never_crash(stack: Stack, body: dict[str, Any]) -> None:
    async def post() -> tuple[int, Any]:
        headers = {"Authorization": f"Bearer {stack.token}"}
        http = aiohttp.ClientSession(stack.url, headers=headers)
        async with http, http.post("/v1/prepare", data=json.dumps(body)) as r:
            return r.status, await r.json(content_type=None)

    status, answer = asyncio.run(post())
    assert status in (201, 400), (body, status, answer)
    if status == 400:
        reasons = {"invalid_request", "duplicate_image", "invalid_image", "invalid_owner"}
        assert answer["error"]["reason"] in reasons
    else:
        assert answer["id"].startswith("prep-")
