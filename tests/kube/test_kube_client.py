"""The client adapter against a real simcluster API server: verbs, the error hierarchy,
retries under injected 429/500, Retry-After, the token bucket, and watch streams."""

from __future__ import annotations

import time

import anyio
import kr8s.asyncio
import pytest
from kr8s.asyncio.objects import Pod

from kube import (
    LEASES,
    NODES,
    PODS,
    AlreadyExists,
    ClientSettings,
    Conflict,
    Forbidden,
    Gone,
    Invalid,
    KubeClient,
    NotFound,
    ServerError,
    TokenBucket,
    TooManyRequests,
    TransportError,
    from_kr8s,
)
from kube.resources import Resource
from simcluster.embedded import EmbeddedCluster
from tests.support.kube import FAST, inject
from tests.support.pods import pod

pytestmark = pytest.mark.anyio


async def test_crud_and_error_hierarchy(client: KubeClient) -> None:
    created = await client.create(PODS, pod("a"), "default")
    uid = created["metadata"]["uid"]
    assert (await client.get(PODS, "a", "default"))["metadata"]["uid"] == uid
    with pytest.raises(AlreadyExists) as exists:
        await client.create(PODS, pod("a"), "default")
    assert exists.value.status == 409 and exists.value.reason == "AlreadyExists"
    with pytest.raises(NotFound) as missing:
        await client.get(PODS, "nope", "default")
    assert missing.value.message == 'pods "nope" not found'
    with pytest.raises(Invalid):
        await client.create(PODS, pod("Bad_Name"), "default")
    stale = dict(created, metadata={**created["metadata"], "labels": {"x": "1"}})
    await client.patch(PODS, "a", {"metadata": {"labels": {"y": "2"}}}, "default")
    with pytest.raises(Conflict) as conflict:
        await client.replace(PODS, "a", stale, "default")
    assert not isinstance(conflict.value, AlreadyExists)
    await client.delete(PODS, "a", "default", grace_period_s=0)
    with pytest.raises(NotFound):
        await client.delete(PODS, "a", "default")


async def test_bind_uid_precondition_and_already_bound(client: KubeClient) -> None:
    await client.create(NODES, {"metadata": {"name": "n1"}})
    p = await client.create(PODS, pod("b"), "default")
    with pytest.raises(Conflict):
        await client.bind("default", "b", "not-the-uid", "n1")
    await client.bind("default", "b", p["metadata"]["uid"], "n1")
    assert (await client.get(PODS, "b", "default"))["spec"]["nodeName"] == "n1"
    with pytest.raises(Conflict):  # a repeated bind: already assigned
        await client.bind("default", "b", p["metadata"]["uid"], "n1")


async def test_forbidden_for_a_service_account(cluster: EmbeddedCluster) -> None:
    assert cluster.server is not None
    from simcluster.apiserver.auth import User

    path = cluster.server.kubeconfig(cluster.workdir / "sa", User("someone", ()))
    async with await KubeClient.connect(FAST, kubeconfig=str(path)) as c:
        with pytest.raises(Forbidden) as err:
            await inject(c, kind="clear")
        assert err.value.status == 403


async def test_429_is_retried_honouring_retry_after(
    client: KubeClient, cluster: EmbeddedCluster
) -> None:
    calls: list[tuple[str, int]] = []

    def observe(verb: str, code: int, _s: float) -> None:
        calls.append((verb, code))

    kubeconfig = str(cluster.kubeconfig)
    await inject(client, kind="api-errors", verb="create", rate=1.0, code=429)
    twice = ClientSettings(max_attempts=2, qps=0)
    async with await KubeClient.connect(twice, kubeconfig=kubeconfig, observer=observe) as c:
        start = time.monotonic()
        with pytest.raises(TooManyRequests) as err:
            await c.create(PODS, pod("c"), "default")
    assert err.value.retry_after_s == 1.0
    assert time.monotonic() - start >= 1.0  # waited for Retry-After before the 2nd attempt
    assert calls[-2:] == [("POST", 429), ("POST", 429)]
    # Half the creates refused: every one still lands, each exactly once.
    await inject(client, kind="api-errors", verb="create", rate=0.3, code=429)
    patient = ClientSettings(max_attempts=20, max_retry_after_s=0.05, qps=0)
    async with await KubeClient.connect(patient, kubeconfig=kubeconfig, observer=observe) as c:
        for i in range(10):
            await c.create(PODS, pod(f"r{i}"), "default")
    await inject(client, kind="clear")
    names = {p["metadata"]["name"] for p in (await client.list(PODS, "default"))["items"]}
    assert names == {f"r{i}" for i in range(10)}
    assert ("POST", 429) in calls[2:]


async def test_5xx_retried_only_when_safe(client: KubeClient) -> None:
    await client.create(PODS, pod("d"), "default")
    calls: list[tuple[str, int]] = []
    client.observer = lambda verb, code, _s: calls.append((verb, code))
    await inject(client, kind="api-errors", verb="*", rate=1.0, code=500)
    with pytest.raises(ServerError):
        await client.create(PODS, pod("e"), "default")
    assert [c for c in calls if c[0] == "POST"] == [("POST", 200), ("POST", 500)]  # no repeat
    calls.clear()
    with pytest.raises(ServerError):
        await client.get(PODS, "d", "default")
    assert calls == [("GET", 500)] * FAST.max_attempts
    await inject(client, kind="api-errors", verb="get", rate=0.5, code=504)
    for _ in range(10):
        assert (await client.get(PODS, "d", "default"))["metadata"]["name"] == "d"
    await inject(client, kind="clear")


async def test_connection_refused_is_a_transport_error(client: KubeClient) -> None:
    client._base = "https://127.0.0.1:1"
    with pytest.raises(TransportError) as err:
        await client.get(PODS, "x", "default")
    assert err.value.sent is False and err.value.__cause__ is not None


async def test_token_bucket_spaces_requests(client: KubeClient) -> None:
    client.bucket = TokenBucket(qps=40, burst=1)
    start = time.monotonic()
    for _ in range(11):
        await client.list(NODES)
    assert time.monotonic() - start >= 10 / 40 * 0.95


async def test_token_bucket_arithmetic() -> None:
    now = [0.0]
    bucket = TokenBucket(qps=10, burst=3, clock=lambda: now[0])
    assert [bucket.reserve() for _ in range(5)] == pytest.approx([0, 0, 0, 0.1, 0.2])
    now[0] = 1.0  # 10 tokens minted, 2 owed, bucket capped at 3
    assert bucket.reserve() == 0
    assert TokenBucket(qps=0, burst=0).reserve() == 0


async def test_watch_events_bookmarks_and_gone(client: KubeClient) -> None:
    listed = await client.list(LEASES, "default")
    rv = listed["metadata"]["resourceVersion"]
    seen: list[str] = []
    # timeout 3: as upstream, no bookmark is due within 2 s of a watch's timeout
    async with client.watch(LEASES, "default", resource_version=rv, timeout_seconds=3) as events:
        await client.create(LEASES, {"metadata": {"name": "l1"}, "spec": {}}, "default")
        async for ev in events:
            seen.append(ev.type)
            if ev.type == "BOOKMARK":
                assert int(ev.object["metadata"]["resourceVersion"]) >= int(rv)
                break
    assert seen[0] == "ADDED" and seen[-1] == "BOOKMARK"
    await inject(client, kind="expire-watches")
    with pytest.raises(Gone):
        await drain(client, rv)


async def drain(client: KubeClient, rv: str) -> None:
    async with client.watch(LEASES, "default", resource_version=rv) as events:
        async for _ in events:
            pass


async def test_watch_stream_ends_on_server_timeout(client: KubeClient) -> None:
    rv = (await client.list(LEASES, "default"))["metadata"]["resourceVersion"]
    start = time.monotonic()
    with anyio.fail_after(5):
        async with client.watch(
            LEASES, "default", resource_version=rv, timeout_seconds=1, bookmarks=False
        ) as events:
            assert [ev async for ev in events] == []
    assert time.monotonic() - start >= 0.9


async def test_kr8s_errors_translate(client: KubeClient) -> None:
    api = client.kr8s
    assert isinstance(api, kr8s.asyncio.Api)
    with pytest.raises(kr8s.NotFoundError) as raw:
        await Pod.get("missing", namespace="default", api=api)
    assert isinstance(from_kr8s(raw.value), NotFound)
    await client.create(PODS, pod("k"), "default")
    with pytest.raises(kr8s.ServerError) as raw2:
        await Pod(pod("k") | {"metadata": {"name": "k", "namespace": "default"}}, api=api).create()
    err = from_kr8s(raw2.value)
    assert isinstance(err, AlreadyExists) and err.status == 409


async def test_an_impersonating_client_sends_every_request_as_its_user(
    client: KubeClient,
) -> None:
    """kube/client.py ``impersonating``: the pool filler's pod writes as sandman-pools (its
    own APF level); the client it came from is unchanged, and both share one bucket."""
    reviews = Resource("authentication.k8s.io", "v1", "selfsubjectreviews", "SelfSubjectReview",
                       False)  # fmt: skip
    review = {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}
    user = "system:serviceaccount:sandman-system:sandman-pools"
    derived = client.impersonating(user)
    got = await derived.create(reviews, review)
    assert got["status"]["userInfo"]["username"] == user
    mine = await client.create(reviews, review)
    assert mine["status"]["userInfo"]["username"] != user
    assert derived.bucket is client.bucket
    assert "Impersonate-User" not in derived.bearer_headers()
