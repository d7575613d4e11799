"""``python -m controller`` as a real process against simcluster: health and readiness
endpoints, metrics, progress logs, a burst bound, and a clean SIGTERM that releases the
lease."""

from __future__ import annotations

import asyncio
import re
import signal
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import aiohttp
import pytest

from kube import LEASES, KubeClient
from simcluster.embedded import EmbeddedCluster
from tests.support.controller import (
    CONTROLLER_USER,
    bound,
    cluster_of,
    create_sandboxes,
    sandboxes,
    writes_by,
)
from tests.support.wait import wait_until_async

pytestmark = pytest.mark.anyio


class Process:
    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc
        self.lines: list[str] = []
        self.health_url = ""

    async def read_logs(self) -> None:
        assert self.proc.stderr is not None
        async for raw in self.proc.stderr:
            line = raw.decode(errors="replace").rstrip()
            self.lines.append(line)
            m = re.search(r"on (http://\S+)$", line)
            if m and "/healthz" in line:
                self.health_url = m.group(1)


SHORT_LEASE = (
    "--election-lease-duration-s", "2", "--election-renew-deadline-s", "1.2",
    "--election-retry-period-s", "0.2",
)  # fmt: skip


@asynccontextmanager
async def controller_process(
    kubeconfig: Path,
    identity: str,
    *extra: str,
    election: tuple[str, ...] = SHORT_LEASE,
) -> AsyncIterator[Process]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "controller",
        "--kubeconfig",
        str(kubeconfig),
        "--health-host",
        "127.0.0.1",
        "--health-port",
        "0",
        "--election-namespace",
        "default",
        "--election-identity",
        identity,
        *election,
        "--progress-interval-s",
        "0.5",
        *extra,
        stderr=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.DEVNULL,
    )
    p = Process(proc)
    reader = asyncio.create_task(p.read_logs())
    try:
        yield p
    finally:
        if proc.returncode is None:
            proc.kill()
        await proc.wait()
        await reader


async def get(session: aiohttp.ClientSession, url: str) -> tuple[int, str]:
    async with session.get(url) as r:
        return r.status, await r.text()


async def wait_ready(http: aiohttp.ClientSession, p: Process) -> None:
    await wait_until_async(lambda: p.health_url, timeout_s=20, what="the health endpoint's log")

    async def ready() -> bool:
        return (await get(http, p.health_url + "/readyz"))[0] == 200

    await wait_until_async(ready, timeout_s=20, interval_s=0.05)


async def wait_bound(client: KubeClient, n: int, timeout_s: float = 30) -> list[dict]:
    """Until at least ``n`` sandboxes are bound; returns the sandboxes then."""

    async def bound_enough() -> list[dict]:
        pods = await sandboxes(client)
        assert bound(pods) >= n, f"{bound(pods)} of {len(pods)} sandboxes bound, waiting for {n}"
        return pods

    return await wait_until_async(bound_enough, timeout_s=timeout_s, interval_s=0.05)


@pytest.mark.parametrize("cluster_settings", [cluster_of(5)])
async def test_controller_process_end_to_end(cluster: EmbeddedCluster, client: KubeClient) -> None:
    assert cluster.cluster is not None
    kubeconfig = cluster.cluster.kubeconfigs["controller"]
    async with controller_process(kubeconfig, "ctl-a") as p, aiohttp.ClientSession() as http:
        await wait_until_async(lambda: p.health_url, timeout_s=20, what="the health endpoint's log")
        assert (await get(http, p.health_url + "/healthz")) == (200, "ok")
        await wait_ready(http, p)
        assert (await get(http, p.health_url + "/readyz")) == (200, "ok")
        await create_sandboxes(client, 50)
        assert bound(await wait_bound(client, 50)) == 50

        async def metrics_text() -> str:
            # The watch can show a pod bound before the bind's own answer was counted.
            text = (await get(http, p.health_url + "/metrics"))[1]
            assert 'sandman_binds_total{outcome="bound"} 50.0' in text
            return text

        metrics = await wait_until_async(metrics_text, timeout_s=5, interval_s=0.05)
        assert "sandman_leader 1.0" in metrics
        # 50 binds + the Lease's creation; renewals are PUTs
        assert 'sandman_api_requests_total{code="201",verb="POST"} 51.0' in metrics
        await wait_until_async(
            lambda: any("leader: pending 0" in ln for ln in p.lines), timeout_s=5
        )
        lease = await client.get(LEASES, "sandman-controller", "default")
        assert lease["spec"]["holderIdentity"] == "ctl-a"
        p.proc.send_signal(signal.SIGTERM)
        async with asyncio.timeout(10):
            assert await p.proc.wait() == 0
    lease = await client.get(LEASES, "sandman-controller", "default")
    assert lease["spec"]["holderIdentity"] == ""  # released on the way out


@pytest.mark.parametrize("cluster_settings", [cluster_of(10, foreign=0.0)])
async def test_leader_sigkilled_mid_burst_standby_finishes(
    cluster: EmbeddedCluster, client: KubeClient
) -> None:
    assert cluster.cluster is not None
    kubeconfig = cluster.cluster.kubeconfigs["controller"]
    n = 400
    slow = ("--client-qps", "100", "--client-burst", "10")  # ~4 s of binds: time to kill the leader
    # Looser than the other tests: this one loads the shared simcluster thread (400 pods
    # starting on virtual kubelets, lists of 400 pods), and a renewal that misses a 1.2 s
    # deadline would (correctly) make the standby give up leading mid-test.
    election = (
        "--election-lease-duration-s", "4", "--election-renew-deadline-s", "3",
        "--election-retry-period-s", "0.5",
    )  # fmt: skip
    async with (
        controller_process(kubeconfig, "ctl-a", *slow, election=election) as a,
        aiohttp.ClientSession() as http,
    ):
        await wait_ready(http, a)
        async with controller_process(kubeconfig, "ctl-b", *slow, election=election) as b:
            await wait_ready(http, b)
            lease = await client.get(LEASES, "sandman-controller", "default")
            assert lease["spec"]["holderIdentity"] == "ctl-a"
            await create_sandboxes(client, n)
            await wait_bound(client, n // 4)
            a.proc.kill()  # SIGKILL: no release, binds in flight are lost
            await a.proc.wait()
            killed_at = bound(await sandboxes(client))
            assert killed_at < n
            pods = await wait_bound(client, n, timeout_s=40)
            assert bound(pods) == n  # no pod lost
            assert not [p for p in pods if p["status"].get("phase") == "Failed"]
            lease = await client.get(LEASES, "sandman-controller", "default")
            assert lease["spec"]["holderIdentity"] == "ctl-b"
            # the standby bound exactly what the dead leader had not (its last responses
            # may still be on their way when the list shows every pod bound)
            want = f'sandman_binds_total{{outcome="bound"}} {n - killed_at}.0'

            async def standby_counted() -> str:
                _, text = await get(http, b.health_url + "/metrics")
                assert want in text, [ln for ln in text.splitlines() if "binds_total" in ln]
                return text

            metrics = await wait_until_async(standby_counted, interval_s=0.05)
            assert want in metrics
            assert "sandman_leader 1.0" in metrics
            assert 'code="0"' not in metrics  # no bind cut off by a lost lease
    # every pod bound by exactly one successful binding request, across both processes
    assert writes_by(cluster, CONTROLLER_USER, subresource="binding", code=201) == n
