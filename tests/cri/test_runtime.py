"""The ``cri`` kubelet runtime against real containerd: a pod of the busybox-static image
(no Python, no libc) runs the daemon bundle mounted read-only from a hostPath, binds its own
loopback pod IP on the host's network, becomes Ready through the real readiness probe, and
is gone (container, sandbox, address) after deletion. Exits are noticed; a pod start pulls
only an absent image. Two simulated nodes share the one containerd, each pod on its own
loopback address, and a pod's CPU and memory limits are in effect in its container's
cgroup."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import grpc
import httpx
import pytest
from cri_api.v1 import api_pb2, api_pb2_grpc
from kubernetes import client, config

from daemon.sandbox import layout
from sandman.sdk.daemon_client import SandboxClient
from simcluster.cluster import Cluster, ClusterSettings
from simcluster.embedded import EmbeddedCluster
from simcluster.errors import SimclusterError
from simcluster.kubelet.cri_runtime import CriRuntime
from simcluster.profile import load_profile
from tests.support.cri import TOKEN, CriHost, daemon_pod, list_containers, ready_pod
from tests.support.wait import wait_until

pytestmark = [pytest.mark.bundle, pytest.mark.timeout(300)]


@pytest.fixture
def cluster(cri_host: CriHost, tmp_path: Path) -> Iterator[EmbeddedCluster]:
    settings = ClusterSettings(nodes=1, runtime="cri", cri_socket=cri_host.socket)
    with EmbeddedCluster(settings, workdir=tmp_path) as c:
        yield c


@pytest.fixture
def two_nodes(cri_host: CriHost, tmp_path: Path) -> Iterator[EmbeddedCluster]:
    settings = ClusterSettings(nodes=2, runtime="cri", cri_socket=cri_host.socket)
    with EmbeddedCluster(settings, workdir=tmp_path) as c:
        yield c


def _set_image(socket: str, image: str, *, present: bool) -> None:
    """Pull or remove ``image`` through containerd's ImageService, as the node agent does."""
    spec = api_pb2.ImageSpec(image=image)
    with grpc.insecure_channel(f"unix:{socket}") as channel:
        stub = api_pb2_grpc.ImageServiceStub(channel)
        if present:
            stub.PullImage(api_pb2.PullImageRequest(image=spec), timeout=60)
        else:
            stub.RemoveImage(api_pb2.RemoveImageRequest(image=spec), timeout=60)


@pytest.mark.anyio
async def test_daemon_runs_from_the_busybox_image_with_the_bundle_read_only(
    cri_host: CriHost, cluster: EmbeddedCluster, bundle_dir: Path
) -> None:
    assert cluster.cluster is not None
    runtime = cluster.cluster.runtime
    assert isinstance(runtime, CriRuntime)
    with config.new_client_from_config(config_file=str(cluster.kubeconfig)) as ac:
        v1 = client.CoreV1Api(ac)
        v1.create_namespace({"metadata": {"name": "t"}})
        _set_image(cri_host.socket, cri_host.task_image.reference, present=False)
        v1.create_namespaced_pod("t", daemon_pod("one", cri_host.task_image.reference, bundle_dir))
        ip = ready_pod(v1, "one").status.pod_ip
        assert ip.startswith("127.") and not ip.startswith("127.0.0.")
        url = f"http://{ip}:{layout.DAEMON_PORT}"
        async with SandboxClient(url, TOKEN) as sandbox:
            info = await sandbox.exec(
                command="ls / && cat /proc/1/cmdline | tr '\\0' ' '", timeout_s=20
            )
            assert info.exit_code == 0, info
            listing = info.stdout.data
            assert "sandman" in listing and "usr" not in listing.split(), (
                listing
            )  # the image's root
            assert "ld-linux" in listing  # PID 1 is the daemon through the bundle's loader
            ro = await sandbox.exec(command="touch /sandman/x", timeout_s=20)
            assert ro.exit_code != 0 and "Read-only" in ro.stderr.data, ro
        assert cri_host.task_image.reference in runtime.pulled  # absent: the start pulled it
        v1.delete_namespaced_pod("one", "t")
        wait_until(lambda: not v1.list_namespaced_pod("t").items, timeout_s=30, interval_s=0.1)
        assert not list_containers(cri_host.socket)
        async with httpx.AsyncClient(timeout=1) as http:
            with pytest.raises(httpx.ConnectError):
                await http.get(f"{url}/healthz")


def test_an_exit_is_noticed_and_a_present_image_is_not_pulled_again(
    cri_host: CriHost, cluster: EmbeddedCluster
) -> None:
    assert cluster.cluster is not None
    runtime = cluster.cluster.runtime
    assert isinstance(runtime, CriRuntime)
    image = cri_host.task_image.reference
    _set_image(cri_host.socket, image, present=True)
    with config.new_client_from_config(config_file=str(cluster.kubeconfig)) as ac:
        v1 = client.CoreV1Api(ac)
        v1.create_namespace({"metadata": {"name": "t"}})
        pod = {
            "metadata": {"name": "exits"},
            "spec": {
                "nodeName": "node-0",
                "restartPolicy": "Never",
                "containers": [
                    {"name": "c", "image": image, "command": ["/bin/sh", "-c", "echo bye; exit 3"]}
                ],
            },
        }
        v1.create_namespaced_pod("t", pod)

        def failed() -> client.V1Pod:
            got = v1.read_namespaced_pod("exits", "t")
            assert got.status.phase == "Failed", got.status
            return got

        done = wait_until(failed, timeout_s=60, interval_s=0.1)
        assert done.status.container_statuses[0].state.terminated.exit_code == 3
        logs = v1.read_namespaced_pod_log("exits", "t")
        assert logs.strip() == "bye"
        assert image not in runtime.pulled  # present: the start did not pull
        v1.delete_namespaced_pod("exits", "t")
        wait_until(lambda: not v1.list_namespaced_pod("t").items, timeout_s=30, interval_s=0.1)


def test_the_cri_profile_takes_containerds_socket_and_refuses_to_run_without_one(
    tmp_path: Path,
) -> None:
    settings = load_profile("cri", {"cri_socket": "/run/x/containerd.sock"})
    assert (settings.runtime, settings.cri_socket, settings.nodes) == (
        "cri",
        "/run/x/containerd.sock",
        1,
    )
    with pytest.raises(SimclusterError, match="cri_socket"):
        Cluster(ClusterSettings(nodes=1, runtime="cri"), tmp_path)


def _cgroup_limits(socket: str, container_id: str) -> tuple[str, str]:
    """(CPU quota/period, memory limit) of a running container's cgroup, read on the host:
    cgroup v1 (``cpu.cfs_quota_us``, ``memory.limit_in_bytes``) or v2 (``cpu.max``,
    ``memory.max``)."""
    with grpc.insecure_channel(f"unix:{socket}") as channel:
        stub = api_pb2_grpc.RuntimeServiceStub(channel)
        status = stub.ContainerStatus(
            api_pb2.ContainerStatusRequest(container_id=container_id, verbose=True), timeout=10
        )
    pid = json.loads(status.info["info"])["pid"]
    paths = {}
    for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        for controller in controllers.split(",") if controllers else ["unified"]:
            paths[controller] = path
    if "memory" in paths:  # v1
        cpu = Path(f"/sys/fs/cgroup/cpu,cpuacct{paths['cpu']}")
        if not cpu.exists():
            cpu = Path(f"/sys/fs/cgroup/cpu{paths['cpu']}")
        quota = (cpu / "cpu.cfs_quota_us").read_text().strip()
        period = (cpu / "cpu.cfs_period_us").read_text().strip()
        memory = Path(f"/sys/fs/cgroup/memory{paths['memory']}/memory.limit_in_bytes")
        return f"{quota} {period}", memory.read_text().strip()
    unified = Path(f"/sys/fs/cgroup{paths['unified']}")
    return (unified / "cpu.max").read_text().strip(), (unified / "memory.max").read_text().strip()


def _container_of(socket: str, pod: str) -> str:
    with grpc.insecure_channel(f"unix:{socket}") as channel:
        stub = api_pb2_grpc.RuntimeServiceStub(channel)
        sandboxes = stub.ListPodSandbox(api_pb2.ListPodSandboxRequest(), timeout=10).items
        (sid,) = [s.id for s in sandboxes if s.metadata.name == pod]
        only = api_pb2.ContainerFilter(pod_sandbox_id=sid)
        listed = stub.ListContainers(api_pb2.ListContainersRequest(filter=only), timeout=10)
    (cid,) = [c.id for c in listed.containers]
    return str(cid)


@pytest.mark.anyio
async def test_two_nodes_share_containerd_and_limits_are_in_effect(
    cri_host: CriHost, two_nodes: EmbeddedCluster, bundle_dir: Path
) -> None:
    image = cri_host.task_image.reference
    _set_image(cri_host.socket, image, present=True)
    with config.new_client_from_config(config_file=str(two_nodes.kubeconfig)) as ac:
        v1 = client.CoreV1Api(ac)
        v1.create_namespace({"metadata": {"name": "t"}})
        for node in ("node-0", "node-1"):
            body = daemon_pod(f"on-{node}", image, bundle_dir, node)
            body["spec"]["containers"][0]["resources"] = {
                "limits": {"cpu": "250m", "memory": "96Mi"},
                "requests": {"cpu": "250m", "memory": "96Mi"},
            }
            v1.create_namespaced_pod("t", body)
        ips = {node: ready_pod(v1, f"on-{node}").status.pod_ip for node in ("node-0", "node-1")}
        assert len(set(ips.values())) == 2 and all(ip.startswith("127.") for ip in ips.values())
        for node, ip in ips.items():
            async with SandboxClient(f"http://{ip}:{layout.DAEMON_PORT}", TOKEN) as sandbox:
                info = await sandbox.exec(command="echo $SANDMAN_POD_IP", timeout_s=20)
                assert (info.exit_code, info.stdout.data.strip()) == (0, ip), (node, info)
            cpu, memory = _cgroup_limits(
                cri_host.socket, _container_of(cri_host.socket, f"on-{node}")
            )
            assert cpu.split() == ["25000", "100000"], cpu  # 250m: 25 ms per 100 ms
            assert memory == str(96 * 2**20), memory
        for node in ips:
            v1.delete_namespaced_pod(f"on-{node}", "t")
        wait_until(lambda: not v1.list_namespaced_pod("t").items, timeout_s=30, interval_s=0.1)
        assert not list_containers(cri_host.socket)
