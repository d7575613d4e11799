"""Process runtime: the pod's command really runs, isolated by bubblewrap, listening on its
own loopback pod IP; the readiness probe is a real HTTP GET; deleting the pod stops the
process within the grace period. Without bubblewrap, pods without volumes still run (not
isolated) and pods with volumes fail to start, as docs/simcluster.md says.

Missing bubblewrap fails the tests that need it rather than skipping them: `make test`
installs it, and a skipped isolation test would hide pods running unconfined.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from kubernetes import client, config

from devstack.rootfs import RootfsError, find_bwrap
from devstack.sandbox_python import host_interpreter
from simcluster.cluster import ClusterSettings
from simcluster.embedded import EmbeddedCluster
from simcluster.kubelet.bwrap import SYSTEM_PATH
from simcluster.kubelet.process import ProcessRuntime
from simcluster.kubelet.settings import NodeSettings
from tests.support.kubectl import Kubectl
from tests.support.manifests import ROOT as CHECKOUT
from tests.support.wait import wait_until

#: The host's Python as a pod sees it (the pod's root holds /usr, not this virtualenv).
PYTHON = host_interpreter()
SERVE = [PYTHON.executable, "-m", "http.server", "--bind"]


@pytest.fixture
def bwrap() -> str:
    try:
        return find_bwrap()
    except RootfsError as exc:
        pytest.fail(str(exc))


def _ready(v1: client.CoreV1Api, name: str, timeout_s: float = 20) -> client.V1Pod:
    def ready() -> client.V1Pod:
        pod = v1.read_namespaced_pod(name, "t")
        conditions = {c.type: c.status for c in pod.status.conditions or []}
        assert conditions.get("Ready") == "True", pod.status
        return pod

    return wait_until(ready, timeout_s=timeout_s, interval_s=0.1)


def _bind(v1: client.CoreV1Api, name: str) -> None:
    body = {"metadata": {"name": name}, "target": {"kind": "Node", "name": "node-0"}}
    v1.create_namespaced_pod_binding(name, "t", body, _preload_content=False).release_conn()


def web_pod(name: str) -> dict:
    return {
        "metadata": {"name": name},
        "spec": {
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 5,
            "containers": [
                {
                    "name": "web",
                    "image": "python:3.11",
                    "command": [*SERVE, "$(POD_IP)", "8080"],
                    "env": [
                        {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}
                    ],
                    "ports": [{"name": "http", "containerPort": 8080}],
                    "readinessProbe": {
                        "httpGet": {"path": "/", "port": "http"},
                        "periodSeconds": 1,
                    },
                }
            ],
        },
    }


def test_process_pod_serves_on_its_pod_ip(bwrap: str, tmp_path: Path) -> None:
    settings = ClusterSettings(
        nodes=1,
        runtime="process",
        node=NodeSettings(preloaded_images=("python:3.11",)),
        process_binds=PYTHON.binds,
    )
    with (
        EmbeddedCluster(settings, workdir=tmp_path) as cluster,
        config.new_client_from_config(config_file=str(cluster.kubeconfig)) as ac,
    ):
        assert cluster.cluster is not None
        runtime = cluster.cluster.runtime
        assert isinstance(runtime, ProcessRuntime)
        v1 = client.CoreV1Api(ac)
        v1.create_namespace({"metadata": {"name": "t"}})
        v1.create_namespaced_pod("t", web_pod("web"))
        _bind(v1, "web")
        pod = _ready(v1, "web")
        ip = pod.status.pod_ip
        assert ip.startswith(f"127.{cluster.cluster.network.first}.0.")  # its reserved network
        r = httpx.get(f"http://{ip}:8080/")
        assert r.status_code == 200
        assert 'href="usr/"' in r.text  # it serves its working directory: "/", not ours
        log = tmp_path / "logs" / "t_web_web.log"
        assert "GET / HTTP/1.1" in log.read_text()  # the probe's and our request
        logs = Kubectl(cluster.kubeconfig).run("-n", "t", "logs", "web", "--tail=1").stdout
        assert logs.count("\n") == 1
        assert '"GET / HTTP/1.1" 200' in logs
        v1.delete_namespaced_pod("web", "t")
        wait_until(lambda: not v1.list_namespaced_pod("t").items, interval_s=0.1)
        try:
            httpx.get(f"http://{ip}:8080/", timeout=1)
            raise AssertionError("the pod's process still answers after deletion")
        except httpx.ConnectError:
            pass
        _bundle_from_host_path(v1, tmp_path)


BUNDLE = """
import http.server, os, pathlib, sys
pathlib.Path("marker").write_text(os.environ["POD_IP"])  # cwd = workingDir = the emptyDir
http.server.ThreadingHTTPServer.allow_reuse_address = True
handler = lambda *a: http.server.SimpleHTTPRequestHandler(*a, directory=os.getcwd())
http.server.ThreadingHTTPServer((sys.argv[1], 8080), handler).serve_forever()
"""


def _bundle_from_host_path(v1: client.CoreV1Api, tmp_path: Path) -> None:
    """A "daemon bundle" delivered by a hostPath volume (as the node agent does), run from its
    mount point, with an emptyDir as working directory."""
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    (bundle / "serve.py").write_text(BUNDLE)
    pod = web_pod("bundled")
    c = pod["spec"]["containers"][0]
    c["command"] = [PYTHON.executable, "/sandman/serve.py", "$(POD_IP)"]
    c["workingDir"] = "/scratch"
    c["volumeMounts"] = [
        {"name": "bundle", "mountPath": "/sandman", "readOnly": True},
        {"name": "scratch", "mountPath": "/scratch"},
    ]
    c["readinessProbe"]["httpGet"]["path"] = "/marker"
    pod["spec"]["volumes"] = [
        {"name": "bundle", "hostPath": {"path": str(bundle), "type": "Directory"}},
        {"name": "scratch", "emptyDir": {}},
    ]
    v1.create_namespaced_pod("t", pod)
    _bind(v1, "bundled")
    p = _ready(v1, "bundled")
    assert httpx.get(f"http://{p.status.pod_ip}:8080/marker").text == p.status.pod_ip
    v1.delete_namespaced_pod("bundled", "t", grace_period_seconds=1)
    wait_until(lambda: not v1.list_namespaced_pod("t").items, interval_s=0.1)
    assert not list((tmp_path / "pods").iterdir())  # the emptyDir went with the pod


def _shell_pod(name: str, script: str, policy: str) -> dict:
    return {
        "metadata": {"name": name},
        "spec": {
            "restartPolicy": policy,
            "containers": [{"name": "c", "image": "sh:1", "command": ["/bin/sh", "-c", script]}],
        },
    }


def test_restart_policy(tmp_path: Path) -> None:
    node = NodeSettings(preloaded_images=("sh:1",), restart_backoff_s=0.1)
    with (
        EmbeddedCluster(
            ClusterSettings(nodes=1, runtime="process", node=node), workdir=tmp_path
        ) as cluster,
        config.new_client_from_config(config_file=str(cluster.kubeconfig)) as ac,
    ):
        v1 = client.CoreV1Api(ac)
        v1.create_namespace({"metadata": {"name": "t"}})
        for name, script, policy in (
            ("done", "exit 0", "Never"),
            ("crash", "exit 3", "Never"),
            ("loop", "exit 3", "OnFailure"),
        ):
            v1.create_namespaced_pod("t", _shell_pod(name, script, policy))
            body = {"metadata": {"name": name}, "target": {"kind": "Node", "name": "node-0"}}
            v1.create_namespaced_pod_binding(name, "t", body, _preload_content=False).release_conn()

        def status(name: str) -> client.V1PodStatus:
            return v1.read_namespaced_pod(name, "t").status

        def restarts(name: str) -> int:
            return max((c.restart_count for c in status(name).container_statuses or []), default=0)

        wait_until(
            lambda: (status("done").phase, status("crash").phase) == ("Succeeded", "Failed"),
            timeout_s=20,
            interval_s=0.1,
        )
        assert status("crash").container_statuses[0].state.terminated.exit_code == 3
        wait_until(lambda: restarts("loop") >= 2, timeout_s=20, interval_s=0.1)
        loop = status("loop")
        assert loop.phase == "Running"
        assert loop.container_statuses[0].last_state.terminated.exit_code == 3
        v1.delete_collection_namespaced_pod("t", grace_period_seconds=0)


# What a pod's shell sees of its surroundings, one "key=value" line each. (In a pod's command
# `$$` is an escaped `$`, as in Kubernetes: the shell gets `$$`, its own PID.)
OBSERVE = """
echo "hostname=$(cat /proc/sys/kernel/hostname)"
echo "pid=$$$$"
test -e "$HOST_TMP_FILE" && echo host_tmp=visible || echo host_tmp=hidden
if ! test -e "$HOST_DIR"; then echo host_dir=hidden
elif touch "$HOST_DIR/probe" 2>/dev/null; then echo host_dir=writable
else echo host_dir=read-only; fi
test -w /usr && echo usr=writable || echo usr=read-only
for p in /root /home /etc/shadow "$CHECKOUT"; do test -e "$p" && echo "$p=visible"; done
echo "cap_eff=$(sed -n 's/^CapEff:[[:space:]]*//p' /proc/self/status)"
echo "path=$PATH"
"""


@contextlib.contextmanager
def _host_paths() -> Iterator[tuple[Path, Path]]:
    """A file in the host's /tmp and a host directory outside /tmp the test may write."""
    with (
        tempfile.NamedTemporaryFile(dir="/tmp", prefix="sandman-host-") as marker,
        tempfile.TemporaryDirectory(dir="/var/tmp", prefix="sandman-host-") as directory,
    ):
        yield Path(marker.name), Path(directory)


def _observe(v1: client.CoreV1Api, name: str, marker: Path, directory: Path) -> dict[str, str]:
    env = [
        {"name": "HOST_TMP_FILE", "value": str(marker)},
        {"name": "HOST_DIR", "value": str(directory)},
        {"name": "CHECKOUT", "value": str(CHECKOUT)},
    ]
    pod = _shell_pod(name, OBSERVE, "Never")
    pod["spec"]["containers"][0]["env"] = env
    v1.create_namespaced_pod("t", pod)
    _bind(v1, name)
    wait_until(
        lambda: v1.read_namespaced_pod(name, "t").status.phase == "Succeeded",
        timeout_s=20,
        interval_s=0.05,
    )
    log = v1.read_namespaced_pod_log(name, "t")
    return dict(line.split("=", 1) for line in log.splitlines() if "=" in line)


def test_process_pod_runs_isolated_by_bubblewrap(bwrap: str, tmp_path: Path) -> None:
    """What docs/simcluster.md promises, seen from inside the pod: its own PID and UTS
    namespaces (the pod name as hostname) with the command as PID 1, a private /tmp, only the
    allow-listed host paths and those read-only (no /root, /home, /etc/shadow or checkout),
    no capability, and the container's PATH rather than the host's."""
    node = NodeSettings(preloaded_images=("sh:1",))
    with (
        _host_paths() as (marker, directory),
        EmbeddedCluster(ClusterSettings(nodes=1, runtime="process", node=node), tmp_path) as c,
        config.new_client_from_config(config_file=str(c.kubeconfig)) as ac,
    ):
        v1 = client.CoreV1Api(ac)
        v1.create_namespace({"metadata": {"name": "t"}})
        seen = _observe(v1, "observer", marker, directory)
        assert seen == {
            "hostname": "observer",
            "pid": "1",  # the command itself: no bwrap reaper in the pod's PID namespace
            "host_tmp": "hidden",
            "host_dir": "hidden",  # /var/tmp is not bound: nothing of it is there
            "usr": "read-only",
            "cap_eff": "0000000000000000",
            "path": SYSTEM_PATH,
        }
        assert not (directory / "probe").exists()


def test_without_bubblewrap_pods_run_unconfined_and_volumes_fail(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The runtime looks for bwrap on PATH when the cluster starts; without it a pod still
    runs, sharing the host's view, and one with volumes fails to start with the kubelet's
    CreateContainerError (volumes are mounts into a bubblewrap sandbox)."""
    node = NodeSettings(preloaded_images=("sh:1",))
    settings = ClusterSettings(nodes=1, runtime="process", node=node)
    with contextlib.ExitStack() as stack:
        marker, directory = stack.enter_context(_host_paths())
        with monkeypatch.context() as patched:
            patched.setenv("PATH", str(tmp_path))  # no bwrap here
            cluster = stack.enter_context(EmbeddedCluster(settings, tmp_path))
        assert os.environ["PATH"] != str(tmp_path)
        v1 = client.CoreV1Api(
            stack.enter_context(config.new_client_from_config(str(cluster.kubeconfig)))
        )
        v1.create_namespace({"metadata": {"name": "t"}})
        seen = _observe(v1, "unconfined", marker, directory)
        assert seen["host_tmp"] == "visible"
        assert int(seen["pid"]) > 2
        (directory / "probe").unlink()  # it did write there: nothing isolated it
        mounted = _shell_pod("mounted", "true", "Never")
        mounted["spec"]["volumes"] = [{"name": "scratch", "emptyDir": {}}]
        mounted["spec"]["containers"][0]["volumeMounts"] = [
            {"name": "scratch", "mountPath": "/scratch"}
        ]
        v1.create_namespaced_pod("t", mounted)
        _bind(v1, "mounted")

        def waiting() -> client.V1ContainerStateWaiting:
            statuses = v1.read_namespaced_pod("mounted", "t").status.container_statuses
            assert statuses and statuses[0].state.waiting, statuses
            return statuses[0].state.waiting

        state = wait_until(waiting, interval_s=0.05)
        assert (state.reason, state.message) == (
            "CreateContainerError",
            "container c: volumes need bubblewrap (bwrap)",
        )
        assert v1.read_namespaced_pod("mounted", "t").status.phase == "Pending"
