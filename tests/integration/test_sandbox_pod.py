"""A sandbox Pod, exactly as the facade renders it, on the simulated cluster in process mode:
it becomes Ready, its real daemon answers tool calls at the pod IP with the derived token,
and deleting the pod stops the daemon."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psutil
from kubernetes import client, config

from daemon.sandbox.layout import DAEMON_PORT
from devstack.sandbox_python import stage_daemon_python
from facade.podspec import DaemonDelivery, SandboxClass, render_pod
from facade.tokens import TokenMinter
from sandman.sdk.daemon_client import SandboxClient
from sandman.wire.facade import CreateSandbox
from simcluster.cluster import ClusterSettings
from simcluster.embedded import EmbeddedCluster
from simcluster.kubelet.settings import NodeSettings
from tests.support.wait import wait_until

IMAGE = "registry.example/tasks/demo:1"


def _alive(process: psutil.Process) -> bool:
    try:
        return process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:  # exited (and reaped) between two checks
        return False


def _wait_ready(v1: client.CoreV1Api, name: str, namespace: str) -> Any:
    def ready() -> Any:
        pod = v1.read_namespaced_pod(name, namespace)
        conditions = {c.type: c.status for c in pod.status.conditions or []}
        assert conditions.get("Ready") == "True", pod.status
        return pod

    return wait_until(ready, timeout_s=30, interval_s=0.1)


async def _tool_calls(url: str, token: str) -> None:
    async with SandboxClient(url, token) as sandbox:
        result = await sandbox.exec(command="echo $TASK_NAME; echo hi > note.txt")
        assert (result.exit_code, result.stdout.data) == (0, "demo\n")
        assert await sandbox.read_file("note.txt") == b"hi\n"
        info = await sandbox.info()
        assert info.pid == 1  # the sandbox's PID 1, as in a container (no bwrap reaper)


def test_rendered_sandbox_pod_runs_the_real_daemon(tmp_path: Path) -> None:
    python = stage_daemon_python(tmp_path / "python")  # the checkout stays out of the pod
    settings = ClusterSettings(
        nodes=1,
        runtime="process",
        node=NodeSettings(preloaded_images=(IMAGE,)),
        process_binds=python.binds,
    )
    minter = TokenMinter(b"k" * 32)
    token = minter.token_for("sb-test", "sb-1", "")
    pod = render_pod(
        CreateSandbox(image=IMAGE, owner="run-1", env={"TASK_NAME": "demo"}),
        SandboxClass(name="tiny"),
        DaemonDelivery("local-process", python=(python.executable,)),
        name="sb-1",
        namespace="sb-test",
        tenant="team-a",
        token=token,
        now=datetime.now(UTC),
    )
    with (
        EmbeddedCluster(settings, workdir=tmp_path) as cluster,
        config.new_client_from_config(config_file=str(cluster.kubeconfig)) as api,
    ):
        v1 = client.CoreV1Api(api)
        v1.create_namespace({"metadata": {"name": "sb-test"}})
        v1.create_namespaced_pod("sb-test", pod)
        binding = {"metadata": {"name": "sb-1"}, "target": {"kind": "Node", "name": "node-0"}}
        v1.create_namespaced_pod_binding("sb-1", "sb-test", binding, _preload_content=False)
        ready = _wait_ready(v1, "sb-1", "sb-test")
        daemons = [
            p
            for p in psutil.Process().children(recursive=True)
            if "daemon.sandbox" in " ".join(p.cmdline())
        ]
        assert daemons, "the sandbox daemon is not running as a process of the kubelet"
        asyncio.run(_tool_calls(f"http://{ready.status.pod_ip}:{DAEMON_PORT}", token))
        v1.delete_namespaced_pod("sb-1", "sb-test")
        wait_until(
            lambda: not any(_alive(p) for p in daemons),
            timeout_s=15,
            interval_s=0.1,
            what="the daemon to exit with its pod",
        )
