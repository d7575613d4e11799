"""A fork bomb or a disk filler in one sandbox leaves its node usable (real containers).

PIDs: the simulated kubelet puts each pod in a cgroup of its own with ``pids.max`` = the
node's ``pod_pids_limit`` (simcluster/kubelet/podcgroup.py), passed to containerd as the
sandbox's ``cgroup_parent``: a loop that forks as fast as it can in one sandbox stops at the
limit, while the daemon of another sandbox on the same node still runs a command. Deleting
the pods removes their cgroups.

Disk: a sandbox writing past its ``ephemeral-storage`` limit is evicted by the kubelet's
check (simcluster/kubelet/storage.py, usage from CRI ``ContainerStats``' writable layer):
the pod turns Failed with reason ``Evicted`` and upstream's message, its container and its
layer are gone, and a new sandbox on the node starts and runs a command.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client, config

from daemon.sandbox import layout
from sandman.sdk.daemon_client import SandboxClient
from simcluster.cluster import ClusterSettings
from simcluster.embedded import EmbeddedCluster
from simcluster.kubelet.cri_runtime import CriRuntime
from simcluster.kubelet.settings import NodeSettings
from tests.support.cri import TOKEN, CriHost, daemon_pod, list_containers, ready_pod
from tests.support.wait import wait_until

pytestmark = [pytest.mark.bundle, pytest.mark.timeout(300)]
LIMIT = 64
# Forks as fast as it can, each `sleep` holding its PID, until the pod's cgroup refuses a
# fork: busybox's sh then stops with "can't fork" (bounded by the count either way).
BOMB = "i=0; while [ $i -lt 400 ]; do i=$((i+1)); sleep 60 & done; echo never-refused"


@pytest.fixture
def cluster(cri_host: CriHost, tmp_path: Path) -> Iterator[EmbeddedCluster]:
    node = NodeSettings(pod_pids_limit=LIMIT, storage_check_interval_s=0.5)
    settings = ClusterSettings(nodes=1, runtime="cri", cri_socket=cri_host.socket, node=node)
    with EmbeddedCluster(settings, workdir=tmp_path) as c:
        yield c


@pytest.mark.anyio
async def test_a_fork_bomb_stops_at_the_pod_pids_limit_and_the_node_stays_usable(
    cri_host: CriHost, cluster: EmbeddedCluster, bundle_dir: Path
) -> None:
    assert cluster.cluster is not None
    runtime = cluster.cluster.runtime
    assert isinstance(runtime, CriRuntime)
    image = cri_host.task_image.reference
    with config.new_client_from_config(config_file=str(cluster.kubeconfig)) as ac:
        v1 = client.CoreV1Api(ac)
        v1.create_namespace({"metadata": {"name": "t"}})
        for name in ("bomb", "bystander"):
            v1.create_namespaced_pod("t", daemon_pod(name, image, bundle_dir))
        bomb, bystander = ready_pod(v1, "bomb"), ready_pod(v1, "bystander")
        uid = bomb.metadata.uid
        assert (runtime.cgroups.pod_dir(uid) / "pids.max").read_text().strip() == str(LIMIT)
        url = f"http://{bomb.status.pod_ip}:{layout.DAEMON_PORT}"
        async with SandboxClient(url, TOKEN) as sandbox:
            ran = await sandbox.exec(command=BOMB, timeout_s=60)
        assert ran.exit_code != 0 and "can't fork" in ran.stderr.data, ran
        assert "never-refused" not in ran.stdout.data
        # The cgroup filled up (the refused shell has since exited, freeing its one PID).
        assert LIMIT - 1 <= runtime.cgroups.pids_current(uid) <= LIMIT
        other = f"http://{bystander.status.pod_ip}:{layout.DAEMON_PORT}"
        async with SandboxClient(other, TOKEN) as sandbox:
            alive = await sandbox.exec(command="echo alive; sleep 0.1 & wait", timeout_s=20)
        assert (alive.exit_code, alive.stdout.data) == (0, "alive\n"), alive
        v1.delete_collection_namespaced_pod("t", grace_period_seconds=0)
        wait_until(lambda: not v1.list_namespaced_pod("t").items, timeout_s=60, interval_s=0.1)
        wait_until(lambda: not runtime.cgroups.pod_dir(uid).exists(), timeout_s=30)


@pytest.mark.anyio
async def test_a_disk_filler_is_evicted_and_the_node_stays_usable(
    cri_host: CriHost, cluster: EmbeddedCluster, bundle_dir: Path
) -> None:
    image = cri_host.task_image.reference
    filler = daemon_pod("filler", image, bundle_dir)
    filler["spec"]["containers"][0]["resources"] = {"limits": {"ephemeral-storage": "8Mi"}}
    with config.new_client_from_config(config_file=str(cluster.kubeconfig)) as ac:
        v1 = client.CoreV1Api(ac)
        v1.create_namespace({"metadata": {"name": "t"}})
        v1.create_namespaced_pod("t", filler)
        pod = ready_pod(v1, "filler")
        url = f"http://{pod.status.pod_ip}:{layout.DAEMON_PORT}"
        async with SandboxClient(url, TOKEN) as sandbox:
            small = await sandbox.exec(
                command="dd if=/dev/zero of=/small bs=1M count=2", timeout_s=20
            )
            assert small.exit_code == 0, small
            assert v1.read_namespaced_pod("filler", "t").status.phase == "Running"
            await sandbox.exec(command="dd if=/dev/zero of=/fill bs=1M count=32", timeout_s=20)

        def evicted() -> client.V1PodStatus:
            status = v1.read_namespaced_pod("filler", "t").status
            assert (status.phase, status.reason) == ("Failed", "Evicted"), status
            return status

        status = wait_until(evicted, timeout_s=30, interval_s=0.2)
        assert status.message == (
            "Pod ephemeral local storage usage exceeds the total limit of containers 8Mi. "
        )
        assert not list_containers(cri_host.socket)  # stopped and removed: its layer is freed
        v1.create_namespaced_pod("t", daemon_pod("next", image, bundle_dir))
        after = ready_pod(v1, "next")
        async with SandboxClient(f"http://{after.status.pod_ip}:{layout.DAEMON_PORT}", TOKEN) as s:
            ran = await s.exec(command="echo usable > /note && cat /note", timeout_s=20)
        assert (ran.exit_code, ran.stdout.data) == (0, "usable\n"), ran
        v1.delete_collection_namespaced_pod("t", grace_period_seconds=0)
        wait_until(lambda: not v1.list_namespaced_pod("t").items, timeout_s=60, interval_s=0.1)
