"""The process runtime never leaves a pod's process behind: not when the runtime closes, not
when a pod is stopped or its start cancelled while it is starting. A process that outlived its
cluster would keep answering on a pod address the next cluster on this machine hands out
again (a trainer's call would land in another cluster's sandbox). The suite's leak check
(tests/conftest.py) fails any of these tests whose process survives."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from simcluster.kubelet.process import ProcessRuntime, ProcessSettings
from simcluster.kubelet.runtime import Container, RuntimeStartError, Sandbox
from simcluster.network import PodNetwork
from tests.support.wait import wait_until_async

pytestmark = pytest.mark.anyio


def _runtime(tmp_path: Path) -> ProcessRuntime:
    return ProcessRuntime(ProcessSettings(log_dir=tmp_path / "logs", bubblewrap=False))


def _sandbox(uid: str) -> Sandbox:
    sleeper = Container(name="c", image="sh:1", argv=("sleep", "300"))
    return Sandbox(uid=uid, namespace="ns", name=uid, ip="127.0.0.1", containers=(sleeper,))


async def test_a_start_after_close_kills_what_it_started(tmp_path: Path) -> None:
    runtime = _runtime(tmp_path)
    await runtime.close()
    with pytest.raises(RuntimeStartError, match="stopped while starting"):
        await runtime.start(_sandbox("late"))


async def test_a_pod_stopped_while_starting_leaves_no_process(tmp_path: Path) -> None:
    runtime = _runtime(tmp_path)
    sandbox = _sandbox("racy")
    start = asyncio.ensure_future(runtime.start(sandbox))
    await asyncio.sleep(0)  # the start has registered the pod and is forking
    await runtime.stop(sandbox, 0)
    with pytest.raises(RuntimeStartError, match="stopped while starting"):
        await start
    await runtime.close()


@pytest.mark.parametrize("turns", [0, 1, 2, 5])
async def test_a_cancelled_start_leaves_no_process(tmp_path: Path, turns: int) -> None:
    runtime = _runtime(tmp_path)
    start = asyncio.ensure_future(runtime.start(_sandbox(f"cancelled-{turns}")))
    for _ in range(turns):
        await asyncio.sleep(0)
    start.cancel()
    with pytest.raises((asyncio.CancelledError, RuntimeStartError)):
        await start
    await runtime.close()


async def test_close_kills_running_pods(tmp_path: Path) -> None:
    runtime = _runtime(tmp_path)
    sandbox = _sandbox("running")
    await runtime.start(sandbox)
    await wait_until_async(lambda: runtime.exited(sandbox) is None, what="the pod runs")
    await runtime.close()
    assert runtime.exited(sandbox) is None  # forgotten: nothing left to report


async def test_a_pod_holds_its_clusters_pod_network_until_it_exits(tmp_path: Path) -> None:
    """A pod process outliving its cluster (the cluster SIGKILLed: pods run in sessions of
    their own) must keep the cluster's loopback range reserved, or the next cluster hands its
    addresses out again while the stale daemon still answers there."""
    network = PodNetwork(nodes=1)
    first = network.reserve()
    runtime = _runtime(tmp_path)
    (fd,) = network.lock_fds
    runtime.inherit(fd)
    sandbox = _sandbox("holder")
    await runtime.start(sandbox)
    network.release()  # the cluster is gone; its pod is not
    taken = PodNetwork(nodes=1)
    try:
        assert taken.reserve() != first
    finally:
        taken.release()
    await runtime.close()  # the pod exits: the range is free again
    again = PodNetwork(nodes=1)
    try:
        assert again.reserve() <= first
    finally:
        again.release()
