"""A private containerd + registry for the ``cri`` runtime's tests, with the images they run.

One host per test session (containerd starts in ~0.2 s, but the images and the daemon bundle
are built once): the busybox-static image the sandboxes run (no Python, no libc), the
sandbox ("pause") image, and one more busybox image that the tests pull or prepare. Where
containerd cannot start (not root, the packages missing), the tests skip and say why —
under CI they fail instead (:mod:`tests.support.prerequisites`): `make test` installs the
packages there.
"""

from __future__ import annotations

import asyncio
import os
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest
from cri_api.v1 import api_pb2, api_pb2_grpc
from kubernetes import client

from daemon.sandbox import layout
from devstack.containerd import ContainerdError, ContainerdHost, missing_tools
from devstack.ociimage import ImageSpec, PushedImage, build_and_push
from tests.support.leaks import FIXTURE_PIDS
from tests.support.prerequisites import missing
from tests.support.wait import wait_until

__all__ = ["TOKEN", "CriHost", "daemon_pod", "list_containers", "ready_pod", "start_cri_host"]

SLEEP = ("/bin/busybox", "sleep", "2147483647")
#: The daemon token of the pods daemon_pod renders.
TOKEN = "cri-test-token"


@dataclass(frozen=True)
class CriHost:
    host: ContainerdHost
    task_image: PushedImage  # what sandboxes run: busybox-static, nothing else
    spare_image: PushedImage  # another image for pull/prepare tests

    @property
    def socket(self) -> str:
        return str(self.host.socket)

    def stop(self) -> None:
        asyncio.run(self.host.stop())


def start_cri_host(config: pytest.Config) -> CriHost:
    """Start containerd and the registry, push the images; skip (fail in CI) if impossible."""
    if os.geteuid() != 0:
        missing("containerd needs root: the cri runtime's tests cannot run")
    if tools := missing_tools():
        missing(f"not installed: {', '.join(tools)} (`make system-deps` installs them)")
    host = ContainerdHost()
    try:
        asyncio.run(host.start())
    except ContainerdError as exc:
        asyncio.run(host.stop())
        missing(f"containerd cannot start here: {exc}")
    config.stash.setdefault(FIXTURE_PIDS, set()).update(p.pid for p in host.processes())
    try:
        build_and_push(host.registry, ImageSpec(host.settings.pause_image.split(":")[0], cmd=SLEEP))
        task = build_and_push(host.registry, ImageSpec("sandman/busybox", cmd=SLEEP))
        spare = build_and_push(
            host.registry, ImageSpec("sandman/spare", cmd=SLEEP, seed=1, padding=4096)
        )
    except BaseException:
        asyncio.run(host.stop())
        raise
    return CriHost(host, task, spare)


def daemon_pod(name: str, image: str, bundle: Path, node: str = "node-0") -> dict:
    """A pod of ``image`` running the daemon bundle from a read-only hostPath as PID 1."""
    pod_ip = {"name": "SANDMAN_POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}
    return {
        "metadata": {"name": name},
        "spec": {
            "nodeName": node,
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 2,
            "containers": [
                {
                    "name": "sandbox",
                    "image": image,
                    "command": layout.bundle_command(host="$(SANDMAN_POD_IP)"),
                    "env": [{"name": "SANDMAN_TOKEN", "value": TOKEN}, pod_ip],
                    "readinessProbe": {
                        "httpGet": {"path": "/healthz", "port": layout.DAEMON_PORT},
                        "periodSeconds": 1,
                    },
                    "volumeMounts": [
                        {"name": "sandman", "mountPath": layout.BUNDLE_MOUNT, "readOnly": True}
                    ],
                }
            ],
            "volumes": [{"name": "sandman", "hostPath": {"path": str(bundle)}}],
        },
    }


def list_containers(socket: str) -> list[str]:
    """The ids of every container containerd holds (any state)."""
    with grpc.insecure_channel(f"unix:{socket}") as channel:
        stub = api_pb2_grpc.RuntimeServiceStub(channel)
        listed = stub.ListContainers(api_pb2.ListContainersRequest(), timeout=10)
    return [c.id for c in listed.containers]


def ready_pod(v1: client.CoreV1Api, name: str, namespace: str = "t") -> client.V1Pod:
    """Pod ``name`` once it is Ready (its daemon answered the kubelet's probe)."""

    def ready() -> client.V1Pod:
        pod = v1.read_namespaced_pod(name, namespace)
        conditions = {c.type: c.status for c in pod.status.conditions or []}
        assert conditions.get("Ready") == "True", pod.status
        return pod

    return wait_until(ready, timeout_s=60, interval_s=0.1)
