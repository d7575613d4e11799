"""The light client (kube/light.py, the node agent's) against a real simcluster API server:
credentials from its kubeconfig, the verbs, an informer over its watch (list, then events,
resumed after the stream ends), errors mapped like KubeClient's, bad kubeconfigs refused with
a clear error."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from kube.credentials import CredentialsError, load_credentials
from kube.errors import AlreadyExists, NotFound
from kube.informer import Informer, InformerSettings
from kube.light import LightClient
from kube.resources import LEASES
from kube.settings import ClientSettings, Timeouts
from simcluster.embedded import EmbeddedCluster
from tests.support.wait import wait_until_async

pytestmark = pytest.mark.timeout(30)
SETTINGS = ClientSettings(qps=0, timeouts=Timeouts(connect_s=2, request_s=5, watch_idle_s=5))


def lease(name: str) -> dict[str, object]:
    return {"metadata": {"name": name}, "spec": {"holderIdentity": "x"}}


@pytest.mark.anyio
async def test_verbs_and_errors(cluster: EmbeddedCluster) -> None:
    async with await LightClient.connect(SETTINGS, kubeconfig=str(cluster.kubeconfig)) as c:
        await c.create(LEASES, lease("a"), "default")
        with pytest.raises(AlreadyExists):
            await c.create(LEASES, lease("a"), "default")
        await c.patch(LEASES, "a", {"metadata": {"annotations": {"k": "v"}}}, "default")
        got = await c.get(LEASES, "a", "default")
        assert got["metadata"]["annotations"] == {"k": "v"}
        await c.delete(LEASES, "a", "default")
        with pytest.raises(NotFound):
            await c.get(LEASES, "a", "default")


@pytest.mark.anyio
async def test_an_informer_runs_over_the_light_client(cluster: EmbeddedCluster) -> None:
    async with await LightClient.connect(SETTINGS, kubeconfig=str(cluster.kubeconfig)) as c:
        await c.create(LEASES, lease("before"), "default")
        # watches of 1 s: the stream ends and is resumed while the test runs
        informer = Informer(c, LEASES, namespace="default",
                            settings=InformerSettings(watch_timeout_s=1))  # fmt: skip
        task = asyncio.create_task(informer.run())
        try:
            await wait_until_async(lambda: informer.cache.get("default/before"))
            await wait_until_async(lambda: informer.stats.watches >= 2, timeout_s=10)
            await c.create(LEASES, lease("after"), "default")
            await wait_until_async(lambda: informer.cache.get("default/after"))
            await c.delete(LEASES, "before", "default")
            await wait_until_async(lambda: informer.cache.get("default/before") is None)
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)


def test_bad_kubeconfigs_are_refused_clearly(tmp_path: Path) -> None:
    missing = tmp_path / "nope"
    with pytest.raises(CredentialsError, match="cannot read kubeconfig"):
        load_credentials(str(missing))
    plugin = tmp_path / "exec.yaml"
    plugin.write_text(
        "current-context: c\ncontexts: [{name: c, context: {cluster: k, user: u}}]\n"
        "clusters: [{name: k, cluster: {server: 'https://127.0.0.1:1'}}]\n"
        "users: [{name: u, user: {exec: {command: x}}}]\n"
    )
    with pytest.raises(CredentialsError, match="not supported"):
        load_credentials(str(plugin))
    with pytest.raises(CredentialsError, match="no context named"):
        load_credentials(str(plugin), "other")
