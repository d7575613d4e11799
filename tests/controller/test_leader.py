"""Lease leader election with two (or three) candidates against simcluster, with short
durations: one leader at a time, graceful handover, takeover after a crash, and a leader cut
off from the API server stops leading before its lease can expire."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator

import anyio
import pytest

from controller.leader import ElectionSettings, LeaderElector
from kube import LEASES, KubeClient
from simcluster.embedded import EmbeddedCluster
from tests.support.kube import FAST
from tests.support.netproxy import FreezableProxy
from tests.support.wait import wait_until_async

pytestmark = pytest.mark.anyio


def settings(identity: str) -> ElectionSettings:
    return ElectionSettings(
        name="ctl",
        namespace="default",
        identity=identity,
        lease_duration_s=2.0,
        renew_deadline_s=1.2,
        retry_period_s=0.2,
    )


class Candidate:
    """Runs an elector; records when it started and stopped leading."""

    def __init__(self, client: KubeClient, identity: str) -> None:
        self.elector = LeaderElector(client, settings(identity))
        self.started: float | None = None
        self.stopped: float | None = None
        self.done = False

    async def lead(self) -> None:
        self.started = time.monotonic()
        try:
            await anyio.sleep_forever()
        finally:
            self.stopped = time.monotonic()

    async def run(self) -> None:
        await self.elector.run(self.lead)
        self.done = True


@pytest.fixture
async def other(cluster: EmbeddedCluster) -> AsyncIterator[KubeClient]:
    """A second client (its own connections), as a second controller process would have.
    Its close is bounded: once, after the partition test failed an assertion under load,
    closing it never returned and the whole CI run hung on this teardown."""
    c = await KubeClient.connect(FAST, kubeconfig=str(cluster.kubeconfig))
    try:
        yield c
    finally:
        with anyio.move_on_after(10):
            await c.close()


async def test_settings_are_validated(client: KubeClient) -> None:
    with pytest.raises(ValueError, match="identity"):
        LeaderElector(client, ElectionSettings())  # "": the controller names it hostname_pid
    with pytest.raises(ValueError, match="lease_duration_s"):
        ElectionSettings(identity="a", lease_duration_s=10, renew_deadline_s=10)
    with pytest.raises(ValueError, match="retry_period_s"):
        ElectionSettings(identity="a", renew_deadline_s=2, retry_period_s=2)
    defaults = ElectionSettings(identity="a")  # Sandman's: failover in seconds (leader.py)
    assert (defaults.lease_duration_s, defaults.renew_deadline_s, defaults.retry_period_s) == (
        3.0,
        2.0,
        0.5,
    )


async def test_one_leader_then_graceful_handover(client: KubeClient, other: KubeClient) -> None:
    a, b = Candidate(client, "a"), Candidate(other, "b")
    async with anyio.create_task_group() as tg:
        tg.start_soon(a.run)
        await wait_until_async(lambda: a.started is not None)
        tg.start_soon(b.run)
        await wait_until_async(lambda: b.elector.leader == "a")
        # The passing of time is what is tested: over several retry periods (0.2 s) b stays
        # a standby while a holds the lease; there is no event that could show it.
        await anyio.sleep(1.0)
        assert b.started is None and a.elector.is_leader()
        lease = await client.get(LEASES, "ctl", "default")
        assert lease["spec"]["holderIdentity"] == "a"
        assert lease["spec"]["leaseDurationSeconds"] == 2
        a.elector.stop()
        await wait_until_async(lambda: a.done)
        released = time.monotonic()
        await wait_until_async(lambda: b.started is not None, timeout_s=5)
        # released, so b need not wait out the 2 s lease (1 s released duration + retry)
        assert b.started is not None and b.started - released < 1.8
        lease = await client.get(LEASES, "ctl", "default")
        assert lease["spec"]["holderIdentity"] == "b"
        assert lease["spec"]["leaseTransitions"] == 1
        assert b.elector.predecessor_quiet_s == 0.0  # a released: it may have just stopped
        tg.cancel_scope.cancel()


async def test_crashed_leader_is_replaced_after_expiry(
    client: KubeClient, other: KubeClient
) -> None:
    a, b = Candidate(client, "a"), Candidate(other, "b")
    async with anyio.create_task_group() as tg:
        async with anyio.create_task_group() as a_group:
            a_group.start_soon(a.run)
            await wait_until_async(lambda: a.started is not None)
            tg.start_soon(b.run)
            await wait_until_async(lambda: b.elector.leader == "a")
            a_group.cancel_scope.cancel()  # a "crashes": no release
        crashed = time.monotonic()
        await wait_until_async(lambda: b.started is not None, timeout_s=6)
        assert b.started is not None and b.started - crashed >= 1.5  # waited out the lease
        # ... and tried again as it ran out, not a retry period later: a's last renewal was
        # seen within one poll (0.24 s) of the crash, the 2 s lease ran from there.
        assert b.started - crashed <= 2.0 + 0.24 + 0.5
        # a stopped at the crash: at least 2 - 1.2 s before b could take over.
        assert 0.8 - 0.05 <= b.elector.predecessor_quiet_s <= b.started - crashed
        tg.cancel_scope.cancel()


async def test_partitioned_leader_steps_down_before_its_lease_expires(
    cluster: EmbeddedCluster, other: KubeClient, tmp_path: object
) -> None:
    assert cluster.server is not None
    host, port = cluster.server.address.rsplit(":", 1)
    proxy = await FreezableProxy(host, int(port)).start()
    try:
        config = proxy.kubeconfig(cluster.kubeconfig, cluster.workdir / "via-proxy")
        async with await KubeClient.connect(FAST, kubeconfig=str(config)) as through_proxy:
            a, b = Candidate(through_proxy, "a"), Candidate(other, "b")
            async with anyio.create_task_group() as tg:
                tg.start_soon(a.run)
                await wait_until_async(lambda: a.started is not None)
                tg.start_soon(b.run)
                await wait_until_async(lambda: b.elector.leader == "a")
                cut = time.monotonic()
                proxy.frozen = True
                await wait_until_async(lambda: b.started is not None, timeout_s=8)
                assert a.stopped is not None and b.started is not None
                assert a.stopped < b.started  # never two leaders
                assert a.stopped - cut <= 1.2 + 0.2 + 0.3  # renew deadline (+ a retry, slack)
                assert a.done  # run() returned: the caller starts over as a standby
                # What b assumes of a's silence is never more than the truth: the hand-over
                # (controller/placement.py) may rely on it.
                assert 0 < b.elector.predecessor_quiet_s <= b.started - a.stopped + 0.05
                tg.cancel_scope.cancel()
    finally:
        await proxy.stop()
