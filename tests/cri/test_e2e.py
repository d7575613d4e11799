"""End to end on real containerd: the node agent pre-pulls an announced image through
containerd's ImageService, then a sandbox created through the facade from that image (busybox-
static: no Python, no libc) becomes Ready in the ``cri`` runtime without a pull — the daemon
bundle mounted read-only from the directory the agent keeps — and serves exec, session and
file calls over its own loopback address."""

from __future__ import annotations

import json
import uuid

import anyio
import grpc
import pytest
from cri_api.v1 import api_pb2, api_pb2_grpc

from kube import LEASES, ClientSettings, KubeClient
from kube.preparation_contract import (
    AGENT_LEASE_NAMESPACE,
    ANNOTATION_READY,
    IMAGE_PREPARATIONS,
    lease_name,
)
from sandman import AsyncSandman
from tests.support.cri import CriHost
from tests.support.kubectl import admin_http
from tests.support.stack import RunningStack
from tests.support.wait import wait_until_async

pytestmark = [pytest.mark.bundle, pytest.mark.slow, pytest.mark.timeout(300)]
NAMESPACE = "sandman-system"


def _remove_image(socket: str, image: str) -> None:
    with grpc.insecure_channel(f"unix:{socket}") as channel:
        stub = api_pb2_grpc.ImageServiceStub(channel)
        stub.RemoveImage(api_pb2.RemoveImageRequest(image=api_pb2.ImageSpec(image=image)))


def _pulls_by_the_runtime(stack: RunningStack, image: str) -> float:
    with admin_http(stack.stack.kubeconfig) as http:
        text = http.get("/metrics").text
    assert "# TYPE simcluster_cri_image_pulls_total counter" in text  # the cri runtime's metric
    prefix = f'simcluster_cri_image_pulls_total{{image="{image}"}} '
    return sum(
        float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(prefix)
    )


async def _prepare(client: KubeClient, image: str) -> None:
    body = {
        "apiVersion": "sandman.io/v1alpha1",
        "kind": "ImagePreparation",
        "metadata": {"name": "cri-e2e"},
        "spec": {"images": [{"image": image, "count": 1}]},
    }
    await client.create(IMAGE_PREPARATIONS, body, NAMESPACE)

    async def ready_on_the_node() -> bool:
        lease = await client.get(LEASES, lease_name("node-0"), AGENT_LEASE_NAMESPACE)
        ready = json.loads(lease["metadata"].get("annotations", {}).get(ANNOTATION_READY, "[]"))
        assert image in ready, ready
        return True

    await wait_until_async(ready_on_the_node, timeout_s=60, interval_s=0.2)


@pytest.mark.anyio
async def test_prepared_image_starts_without_a_pull_and_serves(
    cri_stack: RunningStack, cri_host: CriHost
) -> None:
    image = cri_host.task_image.reference
    await anyio.to_thread.run_sync(_remove_image, cri_host.socket, image)  # not yet prepared
    async with await KubeClient.connect(
        ClientSettings(qps=0, burst=0), kubeconfig=str(cri_stack.stack.kubeconfig)
    ) as kube:
        await _prepare(kube, image)
    owner = f"run-{uuid.uuid4().hex[:10]}"
    async with (
        AsyncSandman(cri_stack.url, cri_stack.token, owner=owner) as client,
        await client.create(image) as sandbox,
    ):
        assert sandbox.state == "ready"
        first = await sandbox.exec("echo $((6 * 7)); ls /; test ! -e /usr")
        assert first.exit_code == 0, first
        assert first.stdout.split()[0] == "42" and "sandman" in first.stdout.split()
        shell = await sandbox.session("agent")
        await shell.run("cd /tmp; export Y=2")
        assert (await shell.run("echo $Y $(pwd)")).output.strip() == "2 /tmp"
        await sandbox.files.write("/tmp/w/a.txt", "hello")
        assert await sandbox.files.read_text("/tmp/w/a.txt") == "hello"
        assert (await sandbox.exec("cat /tmp/w/a.txt")).stdout == "hello"
        readonly = await sandbox.exec("touch /sandman/x")
        assert readonly.exit_code != 0, readonly
    pulls = await anyio.to_thread.run_sync(_pulls_by_the_runtime, cri_stack, image)
    assert pulls == 0, "the pod start pulled an image the agent had prepared"


@pytest.mark.anyio
async def test_the_daemon_runs_hardened_as_pid_1(
    cri_stack: RunningStack, cri_host: CriHost
) -> None:
    """The pod the facade renders (every capability dropped, no privilege escalation, seccomp
    RuntimeDefault) is what containerd runs: PID 1, the daemon, and every command it starts
    hold no capability, run with no_new_privs under a seccomp filter — and still serve."""
    owner = f"run-{uuid.uuid4().hex[:10]}"
    async with (
        AsyncSandman(cri_stack.url, cri_stack.token, owner=owner) as client,
        await client.create(cri_host.task_image.reference) as sandbox,
    ):
        fields = ("CapPrm", "CapEff", "CapBnd", "NoNewPrivs", "Seccomp")
        for pid in ("1", "self"):
            status = (await sandbox.exec(f"cat /proc/{pid}/status")).stdout
            seen = dict(line.split(":\t", 1) for line in status.splitlines() if ":\t" in line)
            assert {f: seen[f].strip() for f in fields} == {
                "CapPrm": "0000000000000000",
                "CapEff": "0000000000000000",
                "CapBnd": "0000000000000000",
                "NoNewPrivs": "1",
                "Seccomp": "2",
            }, (pid, status)
