"""``--metrics-port``: /metrics on a listener of its own, and not beside the API.

The production manifests set it, so their NetworkPolicy can admit trainers to the API port
and only scrapers to the metrics port (manifests/base/networkpolicy.yaml)."""

from __future__ import annotations

from pathlib import Path

import aiohttp
import pytest

from facade.app import FacadeSettings
from facade.audit import AuditSettings
from simcluster.embedded import EmbeddedCluster
from tests.support.facade import live_facade
from tests.support.kube import FAST

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]


async def test_metrics_leave_the_api_port(cluster: EmbeddedCluster, tmp_path: Path) -> None:
    audit = tmp_path / "audit.jsonl"
    settings = FacadeSettings(
        port=0, metrics_port=0, client=FAST, audit=AuditSettings(file=str(audit))
    )
    async with live_facade(cluster.kubeconfig, settings, tmp_path) as live:
        assert not live.facade.metrics_url.startswith(live.url)
        async with live.http.get("/v1/classes") as r:
            assert r.status == 200
        async with live.http.get("/metrics") as r:  # even with a tenant's token
            assert r.status == 404
        async with aiohttp.ClientSession() as scraper:
            async with scraper.get(live.facade.metrics_url) as r:
                assert r.status == 200
                assert 'sandman_facade_requests_total{code="200"' in await r.text()
            async with scraper.get(live.facade.metrics_url.replace("/metrics", "/v1/classes")) as r:
                assert r.status == 404  # the API is not served there
    assert (
        len(audit.read_text().splitlines()) == 2
    )  # the API's two requests; scrapes are no API calls


async def test_without_it_metrics_stay_beside_the_api(
    cluster: EmbeddedCluster, tmp_path: Path
) -> None:
    settings = FacadeSettings(port=0, client=FAST)
    async with live_facade(cluster.kubeconfig, settings, tmp_path) as live:
        assert live.facade.metrics_url == f"{live.url}/metrics"
        async with (
            aiohttp.ClientSession() as anonymous,
            anonymous.get(live.facade.metrics_url) as r,
        ):
            assert r.status == 200
