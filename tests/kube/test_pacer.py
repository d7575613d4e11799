"""The client's adaptive pacing (kube/ratelimit.py's AdaptivePacer): the rule on a hand-driven
clock, its bounds as an invariant, and against simcluster's real flow control — a client
asking for far more than its priority level grants learns the grant, wasting few requests
on 429s while keeping the budget used."""

from __future__ import annotations

import asyncio
import dataclasses
import time

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kube import PODS, KubeClient
from kube.ratelimit import AdaptivePacer, PacerSettings, TokenBucket
from simcluster.apiserver import ServerSettings
from simcluster.embedded import EmbeddedCluster
from tests.support.kube import FAST
from tests.support.pods import pod


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def pacer(qps: float = 1000.0, **settings: float) -> tuple[AdaptivePacer, Clock]:
    clock = Clock()
    bucket = TokenBucket(qps, int(qps), clock)
    return AdaptivePacer(bucket, PacerSettings(**settings), clock), clock  # type: ignore[arg-type]


def test_the_grant_is_known_once_the_server_refused() -> None:
    """What was admitted is the server's grant only once it refused something: before,
    it is what we asked (None); after, the successes of the last second."""
    p, clock = pacer()
    for i in range(300):
        clock.now = i / 300
        p.answered(0.005)
    assert p.grant() is None
    p.throttled(clock.now)
    assert p.grant() == pytest.approx(300, rel=0.02)
    clock.now += 2.0  # nothing answered since: nothing granted in the last second
    assert p.grant() == 0.0
    off, _ = pacer(enabled=False)  # type: ignore[arg-type]
    off.throttled()
    assert off.grant() is None


def test_a_429_lowers_the_rate_to_a_share_of_what_was_granted() -> None:
    p, clock = pacer(cooldown_s=0.1)
    for i in range(400):  # 400 answers within the last second: the server grants ~400/s
        clock.now = i / 400
        p.answered(0.005)
    assert p.bucket.qps == 1000  # at the ceiling already
    sent = clock.now
    p.throttled(sent)
    assert p.bucket.qps == 500  # 0.9 x 400 would be more than a halving: at most that
    assert p.bucket.reserve() > 0  # the saved burst is gone too
    clock.now += 0.3
    p.throttled(sent)  # the same overload answering another request sent with the first
    assert p.decreases == 1
    for _ in range(100):  # 100 slow answers in the last second (the rate holds): 100/s
        clock.now += 0.01
        p.answered(0.2)
    p.throttled(clock.now - 0.005)  # sent after the decrease: a new overload
    assert p.decreases == 2
    assert p.bucket.qps == 250  # 0.9 x 100 = 90, but never below half of 500
    clock.now += 0.3
    p.throttled(clock.now - 0.005)  # the last second still granted 70
    assert p.bucket.qps == 125


def test_few_answers_since_a_decrease_do_not_collapse_the_rate() -> None:
    """The estimate is the whole window's, not the few answers since the last decrease."""
    p, clock = pacer(qps=500, cooldown_s=0.25)
    for _ in range(500):  # a second at the grant: 500/s
        clock.now += 0.002
        p.answered(0.05)
    p.throttled(clock.now)
    assert p.bucket.qps == pytest.approx(450)
    for _ in range(2):  # the next 0.3 s: two answers, the rest still in flight
        clock.now += 0.15
        p.answered(0.2)
    p.throttled(clock.now - 0.01)  # sent after the decrease
    assert p.decreases == 2
    assert p.bucket.qps >= 0.9 * 350  # ~350 answers in the last second, not 2 in 0.3 s


def test_fast_answers_raise_the_rate_slow_ones_hold_it() -> None:
    p, clock = pacer(increase_per_s=0.1, cooldown_s=0.1)
    p.bucket.set_rate(100)
    for _ in range(10):  # 1 s of fast answers, one every 0.1 s: ~10% more
        clock.now += 0.1
        p.answered(0.01)
    assert p.bucket.qps == pytest.approx(100 * 1.01**10)
    qps = p.bucket.qps
    for _ in range(10):  # the server queues our requests: its budget is spent
        clock.now += 0.1
        p.answered(0.2)
    assert p.bucket.qps == qps


def test_a_bucket_without_a_limit_is_left_alone() -> None:
    p, _ = pacer(qps=0)
    p.throttled()
    p.answered(0.0)
    assert (p.bucket.qps, p.decreases) == (0, 0)
    with pytest.raises(ValueError, match="decrease_factor"):
        PacerSettings(decrease_factor=1.0)


@given(
    st.lists(st.tuples(st.floats(0, 2), st.booleans(), st.floats(0, 0.5)), min_size=1, max_size=200)
)
def test_the_rate_stays_between_the_floor_and_the_ceiling(
    events: list[tuple[float, bool, float]],
) -> None:
    p, clock = pacer(qps=300, min_qps=5)
    for dt, throttled, latency in events:
        clock.now += dt
        before = p.bucket.qps
        if throttled:
            p.throttled()
            assert p.bucket.qps >= min(before, max(5, before / 2))  # at most a halving
        else:
            p.answered(latency)
        assert 5 <= p.bucket.qps <= 300


# --- against the server's flow control --------------------------------------------------
RATE = 60  # the level's mutating budget (requests/s): well below what the machine can do
WRITES = 240


@pytest.fixture
def cluster_settings() -> ServerSettings:
    flow = {
        "levels": {"tight": {"mutating": {"rate": RATE, "burst": 30}, "max_queue_wait_s": 0.25}},
        "schemas": [{"name": "everyone", "level": "tight", "users": ["*"]}],
    }
    return ServerSettings(flowcontrol=flow)


def rejected(cluster: EmbeddedCluster) -> float:
    assert cluster.server is not None
    text = cluster.server.metrics.render().decode()
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("apiserver_flowcontrol_rejected_requests_total{")
    )


async def burst(cluster: EmbeddedCluster, adaptive: bool, prefix: str) -> tuple[float, float]:
    """``WRITES`` creates, 32 in flight, from a client allowed 2,000/s: (429s per write,
    the budget's share used)."""
    settings = dataclasses.replace(
        FAST,
        qps=2000,
        burst=200,
        max_attempts=20,
        max_retry_after_s=0.2,
        pacer=PacerSettings(enabled=adaptive),
    )
    before = rejected(cluster)
    async with await KubeClient.connect(settings, kubeconfig=str(cluster.kubeconfig)) as client:
        sem = asyncio.Semaphore(32)

        async def one(i: int) -> None:
            async with sem:
                await client.create(PODS, pod(f"{prefix}-{i}"), "default")

        start = time.monotonic()
        await asyncio.gather(*(one(i) for i in range(WRITES)))
        elapsed = time.monotonic() - start
    used = (WRITES - 30) / RATE / elapsed  # the fastest the budget allows / what it took
    return (rejected(cluster) - before) / WRITES, used


@pytest.mark.anyio
async def test_against_the_server_the_pacer_wastes_few_requests(cluster: EmbeddedCluster) -> None:
    throttled, used = await burst(cluster, adaptive=True, prefix="aimd")
    # Without the pacer: 2-3 429s per write. With it, most of the few left are the first
    # 32 requests in flight at once, before the first answer: a short run's transient.
    assert throttled <= 0.25
    assert used >= 0.6  # the budget stays used (on a loaded 2-core machine, not 95% here)
