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
from conftest import eventually
from harness import create_sandboxes
from test_binder import bound, cluster_of, sandboxes

from controller.kube import LEASES, KubeClient
from simcluster.embedded import EmbeddedCluster

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


@asynccontextmanager
async def controller_process(kubeconfig: Path, identity: str) -> AsyncIterator[Process]:
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
        "--lease-namespace",
        "default",
        "--identity",
        identity,
        "--lease-duration",
        "2",
        "--renew-deadline",
        "1.2",
        "--retry-period",
        "0.2",
        "--progress-interval",
        "0.5",
        "--unbound-client-side",
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


@pytest.mark.parametrize("cluster_settings", [cluster_of(5)])
async def test_controller_process_end_to_end(cluster: EmbeddedCluster, client: KubeClient) -> None:
    assert cluster.cluster is not None
    kubeconfig = cluster.cluster.kubeconfigs["controller"]
    async with controller_process(kubeconfig, "ctl-a") as p, aiohttp.ClientSession() as http:
        await eventually(lambda: bool(p.health_url), within=20)
        assert (await get(http, p.health_url + "/healthz")) == (200, "ok")
        for _ in range(200):
            if (await get(http, p.health_url + "/readyz"))[0] == 200:
                break
            await asyncio.sleep(0.05)
        assert (await get(http, p.health_url + "/readyz")) == (200, "ok")
        await create_sandboxes(client, 50)
        for _ in range(400):
            if bound(await sandboxes(client)) == 50:
                break
            await asyncio.sleep(0.05)
        assert bound(await sandboxes(client)) == 50
        _, metrics = await get(http, p.health_url + "/metrics")
        assert 'sandman_binds_total{outcome="bound"} 50.0' in metrics
        assert "sandman_leader 1.0" in metrics
        # 50 binds + the Lease's creation; renewals are PUTs
        assert 'sandman_api_requests_total{code="201",verb="POST"} 51.0' in metrics
        await eventually(lambda: any("leader: pending 0" in ln for ln in p.lines), within=5)
        lease = await client.get(LEASES, "sandman-controller", "default")
        assert lease["spec"]["holderIdentity"] == "ctl-a"
        p.proc.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(p.proc.wait(), 10) == 0
    lease = await client.get(LEASES, "sandman-controller", "default")
    assert lease["spec"]["holderIdentity"] == ""  # released on the way out
