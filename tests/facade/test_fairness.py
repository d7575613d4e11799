"""Fair sharing (facade/fairness.py): the caps, failed logins and allow-lists, on a real facade.

The API server has no nodes, so sandboxes stay pending and a ``?wait=ready`` parks: the
waits cap is tested on real parked waits here; the tool-call cap with real daemons and two
tenants in tests/e2e/test_fair_sharing.py. The pure parts (the image rule, the counters, the
bucket) get property tests over generated input.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from facade.app import FacadeSettings
from facade.config import ConfigError, load_config
from facade.errors import FacadeError
from facade.fairness import (
    CALL,
    WAIT,
    InFlight,
    LoginThrottle,
    LoginThrottleSettings,
    check_image,
    image_path,
)
from facade.tenancy import Tenant
from simcluster.embedded import EmbeddedCluster
from tests.support.facade import LiveFacade, live_facade, write_config
from tests.support.kube import FAST
from tests.support.metrics import sample
from tests.support.wait import wait_until_async

pytestmark = [pytest.mark.timeout(60)]
TENANT = Tenant("t", "sandman-t", 10, 10.0, 10, max_tool_calls=2, max_waits=3)
NAME = st.from_regex(r"[a-z0-9]([a-z0-9-]{0,8}[a-z0-9])?", fullmatch=True)


@pytest.fixture
async def fair(cluster: EmbeddedCluster, tmp_path: Path) -> AsyncIterator[LiveFacade]:
    settings = FacadeSettings(
        port=0, client=FAST, failed_logins=LoginThrottleSettings(burst=5, rate_per_s=0.01)
    )
    async with live_facade(
        cluster.kubeconfig,
        settings,
        tmp_path,
        classes=("tiny", "gpu"),
        max_waits=2,
        allowed_classes=["tiny"],
        allowed_registries=["registry.example/team-a", "127.0.0.1:5000"],
    ) as running:
        yield running


async def _call(http: aiohttp.ClientSession, method: str, path: str, **kw: Any) -> tuple[int, Any]:
    async with http.request(method, path, **kw) as r:
        body = await r.read()
        decoded = msgspec.json.decode(body) if body else {}
        return r.status, decoded | {"_h": dict(r.headers)}


# --- allow-lists ---------------------------------------------------------------------------
@pytest.mark.anyio
async def test_a_class_or_registry_outside_the_allow_lists_is_a_403(fair: LiveFacade) -> None:
    ok = "registry.example/team-a/task:1"
    cases = [
        ("/v1/sandboxes", {"image": ok, "class": "gpu", "owner": "o"}, "class_not_allowed"),
        (
            "/v1/sandboxes",
            {"image": "registry.example/team-b/x:1", "owner": "o"},
            "registry_not_allowed",
        ),
        ("/v1/sandboxes", {"image": "ubuntu:22.04", "owner": "o"}, "registry_not_allowed"),
        (
            "/v1/batches",
            {"count": 2, "spec": {"image": "docker.io/x", "owner": "o"}},
            "registry_not_allowed",
        ),
        ("/v1/prepare", {"images": [{"image": "evil.example/x"}]}, "registry_not_allowed"),
    ]
    for path, body, reason in cases:
        status, answer = await _call(fair.http, "POST", path, json=body)
        assert (status, answer["error"]["reason"]) == (403, reason), (path, body, answer)
    status, answer = await _call(
        fair.http, "POST", "/v1/sandboxes", json={"image": ok, "owner": "o"}
    )
    assert status == 201, answer
    status, answer = await _call(
        fair.http,
        "POST",
        "/v1/sandboxes",
        json={"image": "127.0.0.1:5000/t@sha256:" + "a" * 64, "owner": "o"},
    )
    assert status == 201, answer
    _, classes = await _call(fair.http, "GET", "/v1/classes")
    assert [c["name"] for c in classes["items"]] == ["tiny"]  # gpu is not offered to it
    assert _refusals(fair, "class_not_allowed") == 1
    assert _refusals(fair, "registry_not_allowed") == 4


def _refusals(fair: LiveFacade, reason: str, tenant: str = "t1") -> float | None:
    registry = fair.facade.metrics.registry
    return sample(
        registry, "sandman_facade_fair_share_refusals_total", tenant=tenant, reason=reason
    )


@given(host=NAME, repo=st.lists(NAME, min_size=1, max_size=3), tag=st.none() | NAME)
def test_an_allowed_prefix_matches_on_path_boundaries_only(
    host: str, repo: list[str], tag: str | None
) -> None:
    registry = f"{host}.example:5000"
    image = f"{registry}/{'/'.join(repo)}" + (f":{tag}" if tag else "")
    assert image_path(image) == f"{registry}/{'/'.join(repo)}"
    allowed = Tenant("t", "ns", 1, 1.0, 1, allowed_registries=(f"{registry}/{repo[0]}",))
    check_image(allowed, image)
    longer = Tenant("t", "ns", 1, 1.0, 1, allowed_registries=(f"{registry}/{repo[0]}x",))
    with pytest.raises(FacadeError) as refused:
        check_image(longer, image)
    assert refused.value.reason == "registry_not_allowed"


def test_docker_hub_names_are_normalised() -> None:
    assert image_path("ubuntu") == "docker.io/library/ubuntu"
    assert image_path("docker.io/ubuntu:22.04") == "docker.io/library/ubuntu"
    assert image_path("team/app:1") == "docker.io/team/app"
    assert image_path("localhost/app") == "localhost/app"
    assert image_path("Reg.Example:5000/a/b:c@sha256:00") == "reg.example:5000/a/b"


# --- the caps ------------------------------------------------------------------------------
@given(ops=st.lists(st.tuples(st.sampled_from(["a", "b"]), st.sampled_from([CALL, WAIT]))))
def test_the_caps_hold_per_tenant_and_kind_and_free_up(ops: list[tuple[str, Any]]) -> None:
    """Any sequence of calls entering: each is admitted exactly while its tenant has a slot
    of that kind; other tenants' and the other kind's holds never count."""
    in_flight = InFlight()
    tenants = {n: Tenant(n, f"ns-{n}", 1, 1.0, 1, max_tool_calls=2, max_waits=3) for n in "ab"}
    held: list[Any] = []
    counts: dict[tuple[str, str], int] = {}
    for name, kind in ops:
        tenant = tenants[name]
        limit = 2 if kind == CALL else 3
        hold = in_flight.hold(tenant, kind)
        if counts.get((name, kind), 0) < limit:
            hold.__enter__()
            held.append(hold)
            counts[(name, kind)] = counts.get((name, kind), 0) + 1
        else:
            with pytest.raises(FacadeError) as refused:
                hold.__enter__()
            assert refused.value.status == 429 and refused.value.retry_after_s
        assert in_flight.count(tenant, kind) == counts[(name, kind)]
    for hold in held:
        hold.__exit__(None, None, None)
    assert all(in_flight.count(t, k) == 0 for t in tenants.values() for k in (CALL, WAIT))


@pytest.mark.anyio
async def test_a_tenant_at_its_waits_cap_gets_429_and_the_slot_comes_back(
    fair: LiveFacade,
) -> None:
    ok = "registry.example/team-a/task:1"
    status, sandbox = await _call(
        fair.http, "POST", "/v1/sandboxes", json={"image": ok, "owner": "o"}
    )
    assert status == 201
    path = f"/v1/sandboxes/{sandbox['id']}"
    parked = [
        asyncio.create_task(_call(fair.http, "GET", path, params={"wait": "ready", "timeout_s": 2}))
        for _ in range(2)
    ]
    await wait_until_async(lambda: _waiters(fair) == 2, timeout_s=10)
    status, refused = await _call(fair.http, "GET", path, params={"wait": "ready", "timeout_s": 3})
    assert (status, refused["error"]["reason"]) == (429, "too_many_waits")
    assert float(refused["_h"]["Retry-After"]) > 0
    assert _refusals(fair, "too_many_waits") == 1
    status, _ = await _call(fair.http, "GET", path)  # a plain read is no wait
    assert status == 200
    assert [status for status, _ in await asyncio.gather(*parked)] == [200, 200]
    assert _waiters(fair) == 0
    status, answer = await _call(fair.http, "GET", path, params={"wait": "ready", "timeout_s": 0})
    assert status == 200, answer


def _waiters(fair: LiveFacade) -> float | None:
    return fair.facade.metrics.registry.get_sample_value("sandman_facade_waiters")


# --- failed logins -------------------------------------------------------------------------
def test_the_login_bucket_refills_and_forgets_the_oldest_address() -> None:
    now = [0.0]
    throttle = LoginThrottle(
        LoginThrottleSettings(burst=3, rate_per_s=1.0, addresses=2), lambda: now[0]
    )
    assert [throttle.failed("a") for _ in range(3)] == [0.0, 0.0, 0.0]
    assert throttle.failed("a") == pytest.approx(1.0)
    now[0] = 1.0
    assert throttle.failed("a") == 0.0
    throttle.failed("b")
    throttle.failed("c")  # a is forgotten: its next failure starts a full bucket
    assert [throttle.failed("a") for _ in range(3)] == [0.0, 0.0, 0.0]


@pytest.mark.anyio
async def test_unknown_tokens_are_throttled_and_a_valid_one_never_is(fair: LiveFacade) -> None:
    bad = {"Authorization": "Bearer not-a-token"}
    seen = [(await _call(fair.http, "GET", "/v1/classes", headers=bad)) for _ in range(8)]
    statuses = [s for s, _ in seen]
    assert statuses == [401] * 5 + [429] * 3, statuses
    assert seen[-1][1]["error"]["reason"] == "login_throttled"
    assert _refusals(fair, "login_throttled", tenant="") == 3
    assert float(seen[-1][1]["_h"]["Retry-After"]) > 1
    status, _ = await _call(fair.http, "GET", "/v1/classes")  # the tenant's, same address
    assert status == 200


def test_the_config_refuses_an_allow_list_naming_no_class(tmp_path: Path) -> None:
    path = write_config(tmp_path / "f.yaml", "tok", allowed_classes=["tiny", "gpu"])
    with pytest.raises(ConfigError, match=r"allowed_classes names no class \['gpu'\]"):
        load_config(path)
    path = write_config(tmp_path / "f.yaml", "tok", allowed_registries="docker.io")
    with pytest.raises(ConfigError, match="allowed_registries must be a list"):
        load_config(path)
    tenant = load_config(write_config(tmp_path / "f.yaml", "tok")).tenants.tenants()[0]
    assert (tenant.allowed_classes, tenant.allowed_registries) == (None, None)  # today's
    assert (tenant.max_tool_calls, tenant.max_waits) == (256, 1024)


@pytest.mark.anyio
async def test_a_request_without_credentials_is_no_failed_login(fair: LiveFacade) -> None:
    async with aiohttp.ClientSession(fair.url) as anonymous:
        statuses = [(await _call(anonymous, "GET", "/v1/classes"))[0] for _ in range(8)]
    assert statuses == [401] * 8
