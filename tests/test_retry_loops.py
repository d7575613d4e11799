"""Every retry loop waits what the one backoff helper says, against real loopback servers.

Each test scripts an aiohttp server on 127.0.0.1 to refuse a first request (429 with
``Retry-After``, or a batch member throttled), seeds the loop's random source, and checks
that the gap the *server* saw between the refused request and its retry is the delay
:class:`sandman.base.backoff.Backoff` computes from the same seed and the loop's own
settings: never shorter, and not much longer. A loop that went back to a backoff of its own
would draw a different delay (or ignore the Retry-After) and fail here.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from controller.binder import Binder, BinderSettings
from controller.view import ClusterView
from kube import PODS, ClientSettings, KubeClient
from kube.informer import Informer, InformerSettings
from sandman import AsyncSandman, QuotaExceeded, RetryPolicy
from sandman.base.backoff import Backoff
from scheduler import Assignment, Scheduler, SchedulerSettings

pytestmark = pytest.mark.anyio
SEED = 20260101
#: Scheduling and loopback round trips on a loaded machine: a retry may come this much late.
SLACK_S = 0.3
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@dataclass
class Arrivals:
    """When each request (``METHOD path``) reached the server, in order."""

    times: dict[str, list[float]] = field(default_factory=dict)

    def note(self, request: web.Request, key: str = "") -> int:
        """Record the arrival; how many requests of that key came so far."""
        seen = self.times.setdefault(key or f"{request.method} {request.path}", [])
        seen.append(time.monotonic())
        return len(seen)

    def gap(self, key: str) -> float:
        first, second = self.times[key][:2]
        return second - first


@contextlib.asynccontextmanager
async def serve(handler: Handler) -> AsyncIterator[str]:
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handler)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    try:
        yield str(server.make_url("")).rstrip("/")
    finally:
        await server.close()


def expected_delays(backoff: Backoff, retry_after: float, n: int = 1) -> list[float]:
    """The first ``n`` delays (retry 1 each) the helper draws from a generator seeded SEED."""
    rng = random.Random(SEED)
    return [backoff.delay(1, retry_after, rng) for _ in range(n)]


def assert_waited(gap: float, expected: float) -> None:
    assert gap >= expected - 0.01, f"retried after {gap:.3f} s, the helper says {expected:.3f}"
    assert gap < expected + SLACK_S, f"retried after {gap:.3f} s, the helper says {expected:.3f}"


def too_many(retry_after: str) -> web.Response:
    status = {"kind": "Status", "code": 429, "reason": "TooManyRequests", "message": "slow down"}
    return web.json_response(status, status=429, headers={"Retry-After": retry_after})


# --- the SDK --------------------------------------------------------------------------------
FAST_SDK = RetryPolicy(attempts=3, initial_s=0.01, max_backoff_s=0.05)
SANDBOX = {"id": "sb-1", "owner": "o", "class": "tiny", "image": "img", "state": "pending"}


def sdk_client(url: str) -> AsyncSandman:
    client = AsyncSandman(url, "t0ken", retry=FAST_SDK, lease_s=None, release_on_exit=False)
    client.transport._rng = random.Random(SEED)
    return client


async def test_sdk_transport_waits_the_helpers_delay_after_a_429() -> None:
    arrivals = Arrivals()

    async def handler(request: web.Request) -> web.Response:
        if arrivals.note(request) == 1:
            body = {"error": {"reason": "rate_limited", "message": "slow down"}}
            return web.json_response(body, status=429, headers={"Retry-After": "1"})
        return web.json_response(SANDBOX)

    async with serve(handler) as url:
        client = sdk_client(url)
        try:
            await client.get("sb-1")
        finally:
            await client.aclose()
    (expected,) = expected_delays(FAST_SDK.backoff, 1.0)
    assert expected >= 1.0
    assert_waited(arrivals.gap("GET /v1/sandboxes/sb-1"), expected)


def batch(failed: list[dict[str, object]], count: int = 2) -> web.Response:
    members = [{**SANDBOX, "id": f"sb-{i}"} for i in range(count - len(failed))]
    return web.json_response({"sandboxes": members, "failed": failed}, status=201)


async def test_sdk_batch_loop_waits_the_helpers_delay_for_throttled_members() -> None:
    arrivals = Arrivals()
    throttled = {"index": 1, "reason": "cluster_throttled", "message": "slow", "status": 429,
                 "retry_after_s": 1.0}  # fmt: skip

    async def handler(request: web.Request) -> web.Response:
        return batch([throttled] if arrivals.note(request) == 1 else [])

    async with serve(handler) as url:
        client = sdk_client(url)
        try:
            created = await client.create_many(2, "img", wait=False)
        finally:
            await client.aclose()
    assert len(created) == 2
    (expected,) = expected_delays(FAST_SDK.backoff, 1.0)
    assert_waited(arrivals.gap("POST /v1/batches"), expected)


async def test_sdk_batch_loop_raises_a_retry_after_longer_than_the_policy_accepts() -> None:
    """As the transport does: an hour's Retry-After (a quota) is an answer, not a sleep."""
    arrivals = Arrivals()
    quota = {"index": 0, "reason": "quota_exceeded", "message": "full", "status": 429,
             "retry_after_s": 3600.0}  # fmt: skip

    async def handler(request: web.Request) -> web.Response:
        arrivals.note(request)
        return batch([quota], count=1)

    async with serve(handler) as url:
        client = sdk_client(url)
        try:
            with pytest.raises(QuotaExceeded) as refused:
                async with asyncio.timeout(10):
                    await client.create_many(1, "img", wait=False)
        finally:
            await client.aclose()
    assert refused.value.retry_after_s == 3600
    assert len(arrivals.times["POST /v1/batches"]) == 1


# --- the Kubernetes client and the informer -------------------------------------------------
VERSION = {"major": "1", "minor": "31", "gitVersion": "v1.31.0"}


def kubeconfig(url: str, directory: Path) -> Path:
    path = directory / "kubeconfig"
    path.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": {"server": url}}],
                "users": [{"name": "u", "user": {"token": "t0ken"}}],
                "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "x",
            }
        )
    )
    return path


@contextlib.asynccontextmanager
async def kube_client(
    handler: Handler, directory: Path, settings: ClientSettings
) -> AsyncIterator[KubeClient]:
    async def with_version(request: web.Request) -> web.StreamResponse:
        if request.path.rstrip("/") == "/version":  # kr8s asks once, when connecting
            return web.json_response(VERSION)
        return await handler(request)

    async with (
        serve(with_version) as url,
        await KubeClient.connect(settings, kubeconfig=str(kubeconfig(url, directory))) as client,
    ):
        client._rng = random.Random(SEED)
        yield client


PODS_PATH = "/api/v1/namespaces/default/pods"
EMPTY_LIST = {"kind": "PodList", "items": [], "metadata": {"resourceVersion": "7"}}


@pytest.mark.parametrize(("retry_after", "max_retry_after_s"), [("1", 30.0), ("5", 0.4)])
async def test_kube_client_waits_the_helpers_delay_after_a_429(
    tmp_path: Path, retry_after: str, max_retry_after_s: float
) -> None:
    """Retry-After 1 is the floor; Retry-After 5 above ``max_retry_after_s`` is capped to it."""
    settings = ClientSettings(
        qps=0, backoff_base_s=0.01, backoff_cap_s=0.05, max_retry_after_s=max_retry_after_s
    )
    arrivals = Arrivals()

    async def handler(request: web.Request) -> web.Response:
        if arrivals.note(request) == 1:
            return too_many(retry_after)
        return web.json_response(EMPTY_LIST)

    async with kube_client(handler, tmp_path, settings) as client:
        await client.list(PODS, "default")
    (expected,) = expected_delays(settings.backoff, float(retry_after))
    assert expected >= min(float(retry_after), max_retry_after_s)
    assert_waited(arrivals.gap(f"GET {PODS_PATH}"), expected)


async def test_informer_relist_and_rewatch_wait_the_helpers_delay(tmp_path: Path) -> None:
    """The client gives up at once (``max_attempts=1``): the informer's own backoff waits."""
    arrivals = Arrivals()

    async def handler(request: web.Request) -> web.StreamResponse:
        key = "WATCH" if request.query.get("watch") == "true" else "LIST"
        if arrivals.note(request, key) == 1:
            return too_many("1")
        if key == "LIST":
            return web.json_response(EMPTY_LIST)
        return await hold_watch(request)

    settings = InformerSettings(backoff_base_s=0.01, backoff_cap_s=5.0)
    client_settings = ClientSettings(qps=0, max_attempts=1)
    async with kube_client(handler, tmp_path, client_settings) as client:
        informer = Informer(client, PODS, namespace="default", settings=settings)
        informer._rng = random.Random(SEED)
        task = asyncio.create_task(informer.run())
        try:
            async with asyncio.timeout(10):
                await informer.wait_synced()
            while len(arrivals.times.get("WATCH", [])) < 2:  # noqa: ASYNC110 - server-side log
                await asyncio.sleep(0.02)
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
    relist, rewatch = expected_delays(settings.backoff, 1.0, n=2)
    assert_waited(arrivals.gap("LIST"), relist)
    assert_waited(arrivals.gap("WATCH"), rewatch)
    assert informer.stats.errors == 2


async def hold_watch(request: web.Request) -> web.StreamResponse:
    """A watch that sends one bookmark and then stays quiet until the client leaves."""
    response = web.StreamResponse(headers={"Content-Type": "application/json"})
    await response.prepare(request)
    bookmark = {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "8"}}}
    await response.write(json.dumps(bookmark).encode() + b"\n")
    with contextlib.suppress(ConnectionError):
        await asyncio.sleep(30)
    return response


async def test_binder_schedules_a_failed_bind_after_the_helpers_delay(tmp_path: Path) -> None:
    """A bind the client gave up on (a 429 with Retry-After: 1) comes back no sooner."""

    async def handler(request: web.Request) -> web.Response:
        return too_many("1")

    settings = BinderSettings(retry_base_s=0.05, retry_cap_s=5.0)
    client_settings = ClientSettings(qps=0, max_attempts=1)
    async with kube_client(handler, tmp_path, client_settings) as client:
        binder = Binder(client, ClusterView(client, Scheduler(SchedulerSettings())), settings)
        binder._rng = random.Random(SEED)
        loop = asyncio.get_running_loop()
        await binder._bind(Assignment("uid-1", "n1", "default", "p1"))
        (handle,) = binder._retry_handles
        scheduled_in = handle.when() - loop.time()
        binder._stop()
    (expected,) = expected_delays(settings.retry_backoff, 1.0)
    assert expected >= 1.0
    assert expected - 0.1 < scheduled_in <= expected


# --- the light client (node agent) ----------------------------------------------------------
async def test_light_client_waits_the_helpers_delay_after_a_429() -> None:
    from kube.credentials import Credentials
    from kube.light import LightClient

    arrivals = Arrivals()

    async def handler(request: web.Request) -> web.Response:
        if arrivals.note(request) == 1:
            return too_many("1")
        return web.json_response({"kind": "Lease", "metadata": {"name": "l"}})

    settings = ClientSettings(qps=0, backoff_base_s=0.01, backoff_cap_s=0.05)
    async with serve(handler) as url:
        client = LightClient(Credentials(server=url, ssl=None), settings)
        client._rng = random.Random(SEED)
        try:
            await client.request("GET", "/apis/coordination.k8s.io/v1/leases")
        finally:
            await client.close()
    (expected,) = expected_delays(settings.backoff, 1.0)
    assert_waited(arrivals.gap("GET /apis/coordination.k8s.io/v1/leases"), expected)
