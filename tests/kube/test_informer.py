"""Informers against a real simcluster API server: list + watch, pagination, indexes,
handlers, dropped watches (resume without relist), forced 410 (relist), bookmarks, idle
streams, and relist reconciliation of deletes missed while not watching."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
import pytest

from kube import LEASES, PODS, KubeClient, Timeouts
from kube.cache import Obj
from kube.informer import Handlers, Informer, InformerSettings
from simcluster.apiserver import ServerSettings
from simcluster.embedded import EmbeddedCluster
from tests.support.kube import FAST, inject
from tests.support.pods import pod
from tests.support.wait import wait_until_async

pytestmark = pytest.mark.anyio


def by_node(obj: Obj) -> list[str]:
    node = (obj.get("spec") or {}).get("nodeName")
    return [node] if node else []


@asynccontextmanager
async def running(inf: Informer) -> AsyncIterator[Informer]:
    lists = inf.stats.lists
    async with anyio.create_task_group() as tg:
        tg.start_soon(inf.run)
        with anyio.fail_after(10):
            await inf.wait_synced()
        await wait_until_async(lambda: inf.stats.lists > lists)
        yield inf
        tg.cancel_scope.cancel()


def recorder(log: list[tuple[str, str]]) -> Handlers:
    def name(o: Obj) -> str:
        return str(o["metadata"]["name"])

    return Handlers(
        add=lambda o: log.append(("add", name(o))),
        update=lambda _old, new: log.append(("update", name(new))),
        delete=lambda o: log.append(("delete", name(o))),
    )


async def test_list_watch_indexes_and_handlers(client: KubeClient) -> None:
    for i in range(5):
        body = pod(f"p{i}")
        if i < 2:
            body["spec"]["nodeName"] = "n1"
        await client.create(PODS, body, "default")
    inf = Informer(
        client,
        PODS,
        namespace="default",
        indexers={"node": by_node},
        settings=InformerSettings(page_size=2),
    )
    log: list[tuple[str, str]] = []
    async with running(inf):
        inf.add_handler(recorder(log))
        assert len(inf.cache) == 5 and inf.stats.lists == 1
        assert sorted(o["metadata"]["name"] for o in inf.cache.by_index("node", "n1")) == [
            "p0",
            "p1",
        ]
        assert sorted(log) == [("add", f"p{i}") for i in range(5)]
        log.clear()
        await client.create(PODS, pod("new"), "default")
        await client.patch(PODS, "new", {"metadata": {"labels": {"a": "b"}}}, "default")
        await client.delete(PODS, "p0", "default", grace_period_s=0)
        await wait_until_async(lambda: len(log) == 4)
        # as upstream, a delete at grace 0 writes the deletionTimestamp first (an update)
        assert log == [("add", "new"), ("update", "new"), ("update", "p0"), ("delete", "p0")]
        assert inf.cache.get("default/new")["metadata"]["labels"] == {"a": "b"}  # type: ignore[index]
        assert [o["metadata"]["name"] for o in inf.cache.by_index("node", "n1")] == ["p1"]


@pytest.mark.parametrize("cluster_settings", [ServerSettings(history=2)])
async def test_a_continue_token_expiring_mid_list_falls_back_to_one_full_list(
    client: KubeClient,
) -> None:
    """Writes elsewhere compact the history (2 events kept) while the pods are listed one per
    page: every continue token expires. Starting the pages over would expire again, forever;
    one unpaginated list is consistent by itself."""
    for i in range(12):
        await client.create(PODS, pod(f"p{i}"), "default")
    await client.create(LEASES, {"metadata": {"name": "churn"}, "spec": {}}, "default")
    inf = Informer(client, PODS, namespace="default", settings=InformerSettings(page_size=1))

    async def churn() -> None:
        for i in range(10_000):
            await client.patch(LEASES, "churn", {"metadata": {"labels": {"i": str(i)}}}, "default")

    async with anyio.create_task_group() as tg:
        tg.start_soon(churn)
        async with running(inf):
            tg.cancel_scope.cancel()
    assert sorted(inf.cache.list_keys()) == sorted(f"default/p{i}" for i in range(12))
    assert inf.stats.full_lists_on_expired >= 1


async def test_dropped_watch_resumes_without_relist(client: KubeClient) -> None:
    inf = Informer(client, PODS, namespace="default")
    async with running(inf):
        await inject(client, kind="drop-watches")
        await client.create(PODS, pod("after-drop"), "default")
        await wait_until_async(lambda: "default/after-drop" in inf.cache)
        assert inf.stats.lists == 1
        assert inf.stats.watches >= 2


async def test_forced_410_relists(client: KubeClient) -> None:
    inf = Informer(client, PODS, namespace="default")
    async with running(inf):
        await client.create(PODS, pod("before"), "default")
        await wait_until_async(lambda: "default/before" in inf.cache)
        await inject(client, kind="expire-watches")
        await wait_until_async(lambda: inf.stats.relists_on_gone == 1)
        await client.create(PODS, pod("after"), "default")
        await wait_until_async(lambda: "default/after" in inf.cache)
        assert inf.stats.lists == 2
        assert set(inf.cache.list_keys()) == {"default/before", "default/after"}


async def test_relist_reports_deletes_missed_while_away(client: KubeClient) -> None:
    for name in ("keep", "gone"):
        await client.create(PODS, pod(name), "default")
    inf = Informer(client, PODS, namespace="default")
    log: list[tuple[str, str]] = []
    inf.add_handler(recorder(log))
    async with running(inf):
        pass
    await client.delete(PODS, "gone", "default", grace_period_s=0)
    await client.patch(PODS, "keep", {"metadata": {"labels": {"v": "2"}}}, "default")
    log.clear()
    async with running(inf):
        assert sorted(log) == [("delete", "gone"), ("update", "keep")]
        assert inf.cache.list_keys() == ["default/keep"]


async def test_bookmarks_advance_the_resume_point(client: KubeClient) -> None:
    inf = Informer(client, PODS, namespace="default")
    async with running(inf):
        start = int(inf.resource_version)
        # Writes to another resource move the store's resourceVersion; only bookmarks can
        # tell this informer about it.
        await client.create(LEASES, {"metadata": {"name": "x"}, "spec": {}}, "default")
        await wait_until_async(
            lambda: inf.stats.bookmarks > 0 and int(inf.resource_version) > start
        )
        assert inf.stats.events == 0


@pytest.mark.parametrize("cluster_settings", [ServerSettings(bookmark_interval_s=60)])
async def test_idle_stream_is_restarted(cluster: EmbeddedCluster) -> None:
    settings = dataclasses.replace(FAST, timeouts=Timeouts(request_s=5, watch_idle_s=0.3))
    async with await KubeClient.connect(settings, kubeconfig=str(cluster.kubeconfig)) as c:
        inf = Informer(c, PODS, namespace="default")
        async with running(inf):
            await wait_until_async(lambda: inf.stats.watches >= 3)
            assert inf.stats.lists == 1 and inf.stats.errors >= 2
            await c.create(PODS, pod("still-watching"), "default")
            await wait_until_async(lambda: "default/still-watching" in inf.cache)


async def test_client_side_filter_drops_and_removes(client: KubeClient) -> None:
    await client.create(PODS, pod("listed-dropped", x="drop"), "default")
    await client.create(PODS, pod("kept"), "default")

    def keep(o: Obj) -> bool:
        return (o["metadata"].get("labels") or {}).get("x") != "drop"

    inf = Informer(client, PODS, namespace="default", keep=keep)
    log: list[tuple[str, str]] = []
    inf.add_handler(recorder(log))
    async with running(inf):
        assert inf.cache.list_keys() == ["default/kept"]
        await client.create(PODS, pod("watched-dropped", x="drop"), "default")
        await client.patch(PODS, "kept", {"metadata": {"labels": {"x": "drop"}}}, "default")
        await wait_until_async(lambda: len(inf.cache) == 0)
        await client.create(PODS, pod("later"), "default")
        await wait_until_async(lambda: "default/later" in inf.cache)
        assert log == [("add", "kept"), ("delete", "kept"), ("add", "later")]
