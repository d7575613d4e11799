"""The burst report's facade counters (load/burst/cluster.py ``facade_counters``): every
counter in ``FACADE_COUNTERS`` is read from each facade's ``/metrics`` (the facade's own
registry in its exposition format, on loopback) and summed over the facades, by its label
(or none), and nothing else is."""

from __future__ import annotations

import pytest
from aiohttp import web
from prometheus_client import generate_latest

from facade.metrics import FacadeMetrics
from load.burst.cluster import FACADE_COUNTERS, facade_counters

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(30)]


async def _serve(metrics: FacadeMetrics) -> tuple[web.AppRunner, str]:
    async def scrape(_request: web.Request) -> web.Response:
        return web.Response(body=generate_latest(metrics.registry), content_type="text/plain")

    app = web.Application()
    app.router.add_get("/metrics", scrape)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    return runner, f"http://127.0.0.1:{port}"


async def test_the_facades_counters_are_summed_by_label() -> None:
    first, second = FacadeMetrics(), FacadeMetrics()
    for m, n in ((first, 3), (second, 4)):
        m.placement_pods.labels("placed").inc(10 * n)
        m.placement_waits.labels("answered").inc(n)
        m.placements_ran_out.inc(n)
        m.creates.labels("unbound").inc(n)
        m.pool_claims.labels("hit").inc(n)
        m.pool_claimed.inc(5 * n)
    first.placement_waits.labels("gave_up").inc()
    runners = [await _serve(m) for m in (first, second)]
    try:
        counted = await facade_counters([url for _, url in runners])
    finally:
        for runner, _ in runners:
            await runner.cleanup()
    assert counted == {
        "placement_pods_total{placed}": 70.0,
        "placement_waits_total{answered}": 7.0,
        "placement_waits_total{gave_up}": 1.0,
        "placements_ran_out_total": 7.0,
        "pod_creates_total{unbound}": 7.0,
        "pool_claims_total{hit}": 7.0,
        "pool_claimed_sandboxes_total": 35.0,
    }
    named = {key.partition("{")[0] for key in counted}
    assert named == {name.removeprefix("sandman_facade_") for name in FACADE_COUNTERS}
