"""Conformance through kr8s (httpx): CRUD, optimistic concurrency, patch types, selectors,
pagination, watch resume and 410 relist, bindings, deletecollection, TokenRequest."""

from __future__ import annotations

import contextlib
import json
import ssl
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import httpx
import kr8s
import kr8s.asyncio
import pytest
from kr8s.asyncio.objects import ConfigMap, Namespace, Pod, ResourceQuota

from simcluster.apiserver import ServerSettings, service_account_user
from simcluster.embedded import EmbeddedCluster
from tests.support.wait import wait_until_async

pytestmark = pytest.mark.anyio


def pod_spec(name: str, ns: str = "t", **labels: str) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": ns, "labels": labels},
        "spec": {"containers": [{"name": "c", "image": "img:1"}], "schedulerName": "sandman"},
    }


@contextlib.asynccontextmanager
async def kr8s_api(cluster: EmbeddedCluster) -> AsyncIterator[kr8s.asyncio.Api]:
    """A kr8s client with namespace ``t``; its httpx session is closed afterwards."""
    api = await kr8s.asyncio.api(kubeconfig=str(cluster.kubeconfig))
    await Namespace({"metadata": {"name": "t"}}, api=api).create()
    try:
        yield api
    finally:
        if api._session is not None:
            await api._session.aclose()


def ca(cluster: EmbeddedCluster) -> ssl.SSLContext:
    assert cluster.server is not None
    assert cluster.server.certs is not None
    return cluster.server.certs.client_context()


@pytest.fixture
async def api(cluster: EmbeddedCluster) -> AsyncIterator[kr8s.asyncio.Api]:
    async with kr8s_api(cluster) as client:
        yield client


async def test_crud_and_conflicts(api: kr8s.asyncio.Api) -> None:
    cm = await ConfigMap(
        {"metadata": {"generateName": "cm-", "namespace": "t"}, "data": {"a": "1"}}, api=api
    )
    await cm.create()
    assert cm.name.startswith("cm-")
    assert len(cm.name) == len("cm-") + 5
    assert cm.metadata.uid
    assert cm.metadata.creationTimestamp
    rv1 = int(cm.metadata.resourceVersion)
    stale = json.loads(json.dumps(cm.raw))
    await cm.patch({"data": {"a": "2"}})
    assert int(cm.metadata.resourceVersion) > rv1
    async with api.call_api(
        "PUT", url=f"configmaps/{cm.name}", namespace="t", raise_for_status=False, json=stale
    ) as r:
        assert r.status_code == 409
        body = r.json()
    assert body["reason"] == "Conflict"
    assert "the object has been modified" in body["message"]
    # JSON patch with a failing test op is 422 and changes nothing
    with pytest.raises(kr8s.ServerError) as err:
        await cm.patch([{"op": "test", "path": "/data/a", "value": "9"}], type="json")
    assert err.value.response.status_code == 422
    await cm.patch([{"op": "add", "path": "/data/b", "value": "3"}], type="json")
    assert cm.raw["data"] == {"a": "2", "b": "3"}
    # duplicate create
    with pytest.raises(kr8s.ServerError) as err:
        await ConfigMap({"metadata": {"name": cm.name, "namespace": "t"}}, api=api).create()
    assert err.value.status["reason"] == "AlreadyExists"
    await cm.delete()
    assert not await cm.exists()


async def test_selectors_and_pagination(api: kr8s.asyncio.Api) -> None:
    for i in range(25):
        await Pod(pod_spec(f"p{i:02d}", tier="a" if i % 2 else "b"), api=api).create()
    names = [
        p.name async for p in api.async_get("pods", namespace="t", label_selector={"tier": "a"})
    ]
    assert len(names) == 12
    set_based = [
        p.name async for p in api.async_get("pods", namespace="t", label_selector="tier notin (a)")
    ]
    assert len(set_based) == 13
    by_field = [
        p.name
        async for p in api.async_get("pods", namespace="t", field_selector="metadata.name=p03")
    ]
    assert by_field == ["p03"]
    sched = [
        p
        async for p in api.async_get(
            "pods", namespace=kr8s.ALL, field_selector="spec.schedulerName=sandman"
        )
    ]
    assert len(sched) == 25
    # limit/continue: three pages of 10, 10, 5
    async with api.call_api("GET", url="pods", namespace="t", params={"limit": 10}) as r:
        page1 = r.json()
    assert len(page1["items"]) == 10
    assert page1["metadata"]["remainingItemCount"] == 15
    token = page1["metadata"]["continue"]
    async with api.call_api(
        "GET", url="pods", namespace="t", params={"limit": 10, "continue": token}
    ) as r:
        page2 = r.json()
    assert page2["items"][0]["metadata"]["name"] == "p10"
    everything = [p async for p in api.async_get("pods", namespace="t")]  # kr8s pages by 100
    assert len(everything) == 25
    meta_only = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json"
    async with api.call_api("GET", url="pods", namespace="t", headers={"Accept": meta_only}) as r:
        partial = r.json()
    assert partial["kind"] == "PartialObjectMetadataList"
    assert set(partial["items"][0]) == {"kind", "apiVersion", "metadata"}


async def test_watch_resume_bookmarks_and_timeout(api: kr8s.asyncio.Api) -> None:
    first = await Pod(pod_spec("w1"), api=api)
    await first.create()
    rv = first.metadata.resourceVersion
    await Pod(pod_spec("w2"), api=api).create()
    await first.patch({"metadata": {"labels": {"x": "y"}}})
    await first.delete()
    seen = []
    async for etype, obj in api.async_watch("pods", namespace="t", since=rv):
        seen.append((etype, obj.name))
        if len(seen) == 4:
            break
    # an unbound pod goes at grace 0, but its deletionTimestamp is written first (MODIFIED)
    assert seen == [("ADDED", "w2"), ("MODIFIED", "w1"), ("MODIFIED", "w1"), ("DELETED", "w1")]
    # bookmarks + server-side timeout through the raw stream
    params = {
        "watch": "true",
        "allowWatchBookmarks": "true",
        "timeoutSeconds": "2",
        "resourceVersion": rv,
    }
    lines = []
    with anyio.fail_after(10):
        async with api.call_api("GET", url="pods", namespace="t", params=params, stream=True) as r:
            async for line in r.aiter_lines():
                lines.append(json.loads(line))
    assert [e["type"] for e in lines[:4]] == ["ADDED", "MODIFIED", "MODIFIED", "DELETED"]


async def test_watch_410_and_kr8s_relist() -> None:
    with EmbeddedCluster(ServerSettings(history=5)) as cluster:
        async with kr8s_api(cluster) as api:
            await _expired_then_relist(api)


async def _expired_then_relist(api: kr8s.asyncio.Api) -> None:
    if True:
        p = await Pod(pod_spec("old"), api=api)
        await p.create()
        old_rv = p.metadata.resourceVersion
        for i in range(10):
            await p.patch({"metadata": {"labels": {"i": str(i)}}})
        params = {"watch": "true", "resourceVersion": old_rv}
        async with api.call_api("GET", url="pods", namespace="t", params=params, stream=True) as r:
            assert r.status_code == 200
            events = [json.loads(line) async for line in r.aiter_lines()]
        assert events[0]["type"] == "ERROR"
        assert events[0]["object"]["code"] == 410
        assert events[0]["object"]["reason"] == "Expired"
        # a list gives a fresh resourceVersion to resume from
        async with api.call_api("GET", url="pods", namespace="t") as r:
            fresh = r.json()["metadata"]["resourceVersion"]
        await p.patch({"metadata": {"labels": {"i": "last"}}})
        async for etype, obj in api.async_watch("pods", namespace="t", since=fresh):
            assert (etype, obj.labels["i"]) == ("MODIFIED", "last")
            break


async def test_binding_semantics(api: kr8s.asyncio.Api) -> None:
    p = await Pod(pod_spec("b1"), api=api)
    await p.create()

    async def bind(body: dict) -> httpx.Response:
        async with api.call_api(
            "POST", url="pods/b1/binding", namespace="t", json=body, raise_for_status=False
        ) as r:
            return r

    wrong_uid = await bind(
        {"metadata": {"name": "b1", "uid": "nope"}, "target": {"kind": "Node", "name": "n1"}}
    )
    assert wrong_uid.status_code == 409
    assert "Precondition failed: UID in precondition: nope" in wrong_uid.json()["message"]
    ok = await bind(
        {
            "metadata": {"name": "b1", "uid": p.metadata.uid},
            "target": {"kind": "Node", "name": "n1"},
        }
    )
    assert ok.status_code == 201
    assert ok.json()["status"] == "Success"
    again = await bind({"metadata": {"name": "b1"}, "target": {"kind": "Node", "name": "n2"}})
    assert again.status_code == 409
    assert again.json()["message"] == (
        'Operation cannot be fulfilled on pods/binding "b1": '
        'pod b1 is already assigned to node "n1"'
    )
    await p.refresh()
    assert p.spec.nodeName == "n1"
    # a pod being deleted cannot be bound
    d = await Pod(pod_spec("b2"), api=api)
    await d.create()
    await d.patch({"metadata": {"finalizers": ["x/y"]}})
    await d.delete()
    async with api.call_api(
        "POST", url="pods/b2/binding", namespace="t", raise_for_status=False,
        json={"metadata": {"name": "b2"}, "target": {"name": "n1"}},
    ) as r:  # fmt: skip
        assert r.status_code == 409
        assert "is being deleted, cannot be assigned to a host" in r.json()["message"]
    # the finalizer holds the object; removing it completes the deletion
    await d.patch({"metadata": {"finalizers": None}})
    assert not await d.exists()


async def test_deletecollection_and_token(api: kr8s.asyncio.Api, cluster: EmbeddedCluster) -> None:
    for i in range(4):
        await Pod(pod_spec(f"d{i}", group="g" if i < 3 else "h"), api=api).create()
    async with api.call_api(
        "DELETE", url="pods", namespace="t", params={"labelSelector": "group=g"}
    ) as r:
        assert r.json()["kind"] == "PodList"
    left = [p.name async for p in api.async_get("pods", namespace="t")]
    assert left == ["d3"]
    async with api.call_api(
        "POST",
        url="serviceaccounts/default/token",
        namespace="t",
        json={"spec": {"audiences": ["x"]}},
    ) as r:
        token = r.json()["status"]["token"]
    async with httpx.AsyncClient(verify=ca(cluster)) as client:
        r = await client.get(
            f"{cluster.server.url}/api/v1/namespaces/t/pods",
            headers={"Authorization": f"Bearer {token}"},
        )
    assert r.status_code == 200
    async with httpx.AsyncClient(verify=ca(cluster)) as client:
        r = await client.get(
            f"{cluster.server.url}/api/v1/pods", headers={"Authorization": "Bearer bad"}
        )
    assert r.status_code == 401
    assert r.json()["reason"] == "Unauthorized"


async def test_429_retry_after_and_quota_forbidden(tmp_path: Path) -> None:
    flow = {
        "levels": {"sandman": {"mutating": {"rate": 3, "burst": 3}, "max_queue_wait_s": 0.0}},
        "schemas": [{"name": "sandman", "level": "sandman", "service_accounts": ["t/*"]}],
    }
    with EmbeddedCluster(ServerSettings(flowcontrol=flow)) as cluster:
        assert cluster.server is not None
        async with kr8s_api(cluster) as admin:
            quota = {"metadata": {"name": "q", "namespace": "t"}, "spec": {"hard": {"pods": "1"}}}
            await ResourceQuota(quota, api=admin).create()
            await Pod(pod_spec("first"), api=admin).create()
            with pytest.raises(kr8s.ServerError) as forbidden:
                await Pod(pod_spec("second"), api=admin).create()
            await ResourceQuota(quota, api=admin).delete()
        assert forbidden.value.response is not None
        assert forbidden.value.response.status_code == 403
        assert forbidden.value.status["message"].startswith(
            'pods "second" is forbidden: exceeded quota: q'
        )
        sa_config = cluster.server.kubeconfig(tmp_path / "sa", service_account_user("t", "bot"))
        sa = await kr8s.asyncio.api(kubeconfig=str(sa_config))
        errors: list[kr8s.ServerError] = []
        try:
            for i in range(6):
                try:
                    await Pod(pod_spec(f"r{i}"), api=sa).create()
                except kr8s.ServerError as e:
                    errors.append(e)
        finally:
            if sa._session is not None:
                await sa._session.aclose()
        assert errors  # budget: 3/s with a burst of 3
        response = errors[0].response
        assert response is not None
        assert (response.status_code, response.headers["Retry-After"]) == (429, "1")
        assert errors[0].status["reason"] == "TooManyRequests"


async def test_owner_deletion_collects_dependents(api: kr8s.asyncio.Api) -> None:
    owner = await ConfigMap({"metadata": {"name": "owner", "namespace": "t"}}, api=api)
    await owner.create()
    ref = {"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": owner.metadata.uid}
    for name in ("dep-a", "dep-b"):
        spec = pod_spec(name)
        spec["metadata"]["ownerReferences"] = [ref]
        await Pod(spec, api=api).create()
    await owner.delete()  # background propagation: the pods go shortly after

    async def no_pods() -> bool:
        return not [p async for p in api.async_get("pods", namespace="t")]

    await wait_until_async(no_pods, timeout_s=5, interval_s=0.05)
    keeper = await ConfigMap({"metadata": {"name": "keeper", "namespace": "t"}}, api=api)
    await keeper.create()
    spec = pod_spec("orphan")
    spec["metadata"]["ownerReferences"] = [{**ref, "name": "keeper", "uid": keeper.metadata.uid}]
    await Pod(spec, api=api).create()
    await keeper.delete(propagation_policy="Orphan")

    async def orphaned() -> bool:
        orphan = await Pod.get("orphan", namespace="t", api=api)
        return not orphan.metadata.get("ownerReferences")

    await wait_until_async(orphaned, timeout_s=5, interval_s=0.05)
