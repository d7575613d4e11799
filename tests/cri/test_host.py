"""The private containerd leaves nothing behind: a container still running when it stops
(a runtime that crashed, a cancelled start) is removed with its sandbox, and no process,
mount or file of it is left."""

from __future__ import annotations

import asyncio
import secrets
from pathlib import Path

import grpc
import psutil
import pytest
from cri_api.v1 import api_pb2, api_pb2_grpc

from devstack.containerd import ContainerdHost
from devstack.ociimage import ImageSpec, build_and_push
from tests.support.cri import SLEEP, CriHost

pytestmark = pytest.mark.timeout(120)


def _sleepers(marker: str) -> list[int]:
    return [p.pid for p in psutil.process_iter(["cmdline"]) if marker in (p.info["cmdline"] or [])]


async def _run_orphan(host: ContainerdHost, image: str, marker: str) -> None:
    """A pod and a container made directly through CRI, that nobody removes."""
    config = api_pb2.PodSandboxConfig(
        metadata=api_pb2.PodSandboxMetadata(name="orphan", uid=marker, namespace="t"),
        linux=api_pb2.LinuxPodSandboxConfig(
            security_context=api_pb2.LinuxSandboxSecurityContext(
                namespace_options=api_pb2.NamespaceOption(network=api_pb2.NODE)
            )
        ),
    )
    async with grpc.aio.insecure_channel(f"unix:{host.socket}") as channel:
        rt = api_pb2_grpc.RuntimeServiceStub(channel)
        img = api_pb2_grpc.ImageServiceStub(channel)
        await img.PullImage(api_pb2.PullImageRequest(image=api_pb2.ImageSpec(image=image)))
        pod = await rt.RunPodSandbox(api_pb2.RunPodSandboxRequest(config=config))
        container = api_pb2.ContainerConfig(
            metadata=api_pb2.ContainerMetadata(name="c"),
            image=api_pb2.ImageSpec(image=image),
            command=["/bin/busybox", "sleep", marker],
        )
        created = await rt.CreateContainer(
            api_pb2.CreateContainerRequest(
                pod_sandbox_id=pod.pod_sandbox_id, config=container, sandbox_config=config
            )
        )
        await rt.StartContainer(api_pb2.StartContainerRequest(container_id=created.container_id))


@pytest.mark.anyio
async def test_stop_removes_containers_left_running(cri_host: CriHost) -> None:
    marker = str(100_000 + secrets.randbelow(800_000))  # the sleeper's argument: unique
    host = ContainerdHost()
    await host.start()
    try:
        root = host.root
        await asyncio.to_thread(
            build_and_push, host.registry, ImageSpec("sandman/pause", cmd=SLEEP)
        )
        image = await asyncio.to_thread(build_and_push, host.registry, ImageSpec("sandman/busybox"))
        await _run_orphan(host, image.reference, marker)
        assert _sleepers(marker), "the container did not start"
    finally:
        await host.stop()
    assert not _sleepers(marker), "a container outlived its containerd"
    assert not Path(root).exists()
    assert str(root) not in Path("/proc/self/mounts").read_text()
