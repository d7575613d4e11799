"""The streaming pod subresources through real clients: ``kubectl logs -f`` and the official
client's followed log stream until the container ends; ``kubectl exec`` (plain, ``-i``,
``-it`` under a terminal) and the client's ``stream()`` run a command inside the container
of a process-runtime pod and report its exit code; the refusals (no upgrade headers, a
virtual pod, RBAC without ``create``) are upstream's Status answers.

The pods wait for a file the test creates through ``kubectl exec``, so a test never sleeps
to learn that a stream is still open: it reads what arrived, then releases the pod.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import pty
import select
import struct
import subprocess
import termios
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, config
from kubernetes.stream import stream

from devstack.rootfs import RootfsError, find_bwrap
from simcluster.apiserver.auth import service_account_user
from simcluster.apiserver.http import ServerSettings
from simcluster.cluster import ClusterSettings
from simcluster.embedded import EmbeddedCluster
from simcluster.kubelet.settings import NodeSettings
from tests.support.kubectl import Kubectl, admin_http, kubectl_path
from tests.support.wait import wait_until

#: Waits for /tmp/go (created by the test through exec), prints before and after.
GATED = "echo first; while [ ! -e /tmp/go ]; do sleep 0.05; done; echo last"


@pytest.fixture(scope="module")
def process_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedCluster]:
    try:
        find_bwrap()
    except RootfsError as exc:
        pytest.fail(str(exc))  # the exec's namespaces are bubblewrap's
    settings = ClusterSettings(
        nodes=1, runtime="process", node=NodeSettings(preloaded_images=("busybox",))
    )
    with EmbeddedCluster(settings, workdir=tmp_path_factory.mktemp("streams")) as c:
        yield c


def _pod(name: str, script: str, working_dir: str = "") -> dict:
    container = {"name": "c", "image": "busybox", "command": ["sh", "-c", script]}
    if working_dir:
        container["workingDir"] = working_dir
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "nodeName": "node-0",
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 1,
            "containers": [container],
        },
    }


@contextlib.contextmanager
def _running(k: Kubectl, name: str, script: str, working_dir: str = "") -> Iterator[None]:
    """A pod running ``script``, deleted (its processes stopped) when the block ends."""
    k.run("apply", "-f", "-", stdin=json.dumps(_pod(name, script, working_dir)))
    try:
        wait_until(
            lambda: k.run("get", "pod", name, "-o", "jsonpath={.status.phase}").stdout == "Running",
            what=f"pod {name} Running",
        )
        yield
    finally:
        k.run("delete", "pod", name, "--wait=true")


def _read_until(fd: int, needle: bytes, seen: bytearray) -> bytes:
    """Read a terminal (or pipe) until ``needle`` arrived; the reads block on select."""

    def arrived() -> bool:
        ready, _, _ = select.select([fd], [], [], 0.2)
        if ready:
            seen.extend(os.read(fd, 4096))
        return needle in seen

    wait_until(arrived, interval_s=0.01, what=f"{needle!r} on the terminal")
    return bytes(seen)


def test_kubectl_logs_follow_streams_until_the_container_ends(
    process_cluster: EmbeddedCluster,
) -> None:
    k = Kubectl(process_cluster.kubeconfig)
    with _running(k, "follow", GATED):
        logs = k.popen("logs", "-f", "follow", stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            assert logs.stdout is not None
            assert logs.stdout.readline() == "first\n"  # arrived while the container runs
            assert logs.poll() is None  # and the stream stays open
            k.run("exec", "follow", "--", "touch", "/tmp/go")
            out, err = logs.communicate(timeout=20)  # ends by itself once the container ends
        finally:
            logs.kill()
            logs.wait()
        assert (out, logs.returncode) == ("last\n", 0), err


def test_client_follows_a_log_with_preload_off(process_cluster: EmbeddedCluster) -> None:
    k = Kubectl(process_cluster.kubeconfig)
    kubeconfig = str(process_cluster.kubeconfig)
    with (
        _running(k, "follow-client", GATED),
        config.new_client_from_config(config_file=kubeconfig) as api,
    ):
        v1 = client.CoreV1Api(api)
        resp = v1.read_namespaced_pod_log(
            "follow-client", "default", follow=True, _preload_content=False
        )
        chunks = resp.stream(decode_content=False)
        assert next(chunks) == b"first\n"
        k.run("exec", "follow-client", "--", "touch", "/tmp/go")
        assert b"".join(chunks) == b"last\n"  # the iterator ends: the response ended
        resp.release_conn()
        # a finished container's followed log is what it wrote, at once; tailLines applies
        assert v1.read_namespaced_pod_log("follow-client", "default", follow=True) == (
            "first\nlast\n"
        )
        tail = v1.read_namespaced_pod_log("follow-client", "default", follow=True, tail_lines=1)
        assert tail == "last\n"


def test_kubectl_exec_runs_in_the_container_and_reports_the_exit_code(
    process_cluster: EmbeddedCluster,
) -> None:
    k = Kubectl(process_cluster.kubeconfig)
    with _running(k, "ex", "echo mark > /tmp/own; exec sleep 600", working_dir="/usr"):
        r = k.run("exec", "ex", "--", "sh", "-c", "echo hi; echo oops >&2; exit 3", check=False)
        assert (r.returncode, r.stdout) == (3, "hi\n")
        assert r.stderr.startswith("oops\n")
        assert "command terminated with exit code 3" in r.stderr
        # the container's own view: its private /tmp, its working directory, its PID 1, its
        # hostname, no capability, the container's PATH
        script = "cat /tmp/own; pwd; cat /proc/1/cmdline | tr '\\0' ' '; echo; hostname; "
        script += "grep CapEff /proc/self/status; echo $PATH"
        r = k.run("exec", "ex", "--", "sh", "-c", script)
        assert r.stdout.splitlines() == [
            "mark",
            "/usr",
            "sleep 600 ",
            "ex",
            "CapEff:\t0000000000000000",
            "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        ]
        assert (
            k.run("exec", "-i", "ex", "--", "sh", "-c", "tr a-z A-Z", stdin="up\n").stdout == "UP\n"
        )
        missing = k.run("exec", "ex", "-c", "nope", "--", "true", check=False)
        assert "container nope is not valid for pod ex" in missing.stderr


def test_kubectl_attach_streams_the_container_output_until_it_ends(
    process_cluster: EmbeddedCluster,
) -> None:
    k = Kubectl(process_cluster.kubeconfig)
    script = "echo before; while [ ! -e /tmp/go ]; do echo tick; sleep 0.05; done; echo after"
    with _running(k, "att", script):
        wait_until(lambda: k.run("logs", "att").stdout.startswith("before\n"), what="before")
        attach = k.popen("attach", "att", stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            assert attach.stdout is not None
            assert attach.stdout.readline() == "tick\n"  # what it writes from now on
            k.run("exec", "att", "--", "touch", "/tmp/go")
            out, err = attach.communicate(timeout=20)  # ends with the container
        finally:
            attach.kill()
            attach.wait()
    assert out.endswith("tick\nafter\n") and "before" not in out, out
    assert attach.returncode == 0, err


def test_kubectl_exec_it_gets_a_terminal_with_its_size(process_cluster: EmbeddedCluster) -> None:
    k = Kubectl(process_cluster.kubeconfig)
    with _running(k, "tty", "exec sleep 600"):
        master, slave = pty.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 33, 101, 0, 0))
        env = dict(os.environ, KUBECONFIG=str(k.kubeconfig))
        proc = subprocess.Popen(
            [kubectl_path(), "exec", "-it", "tty", "--", "sh"],
            stdin=slave, stdout=slave, stderr=slave, env=env, start_new_session=True,
        )  # fmt: skip
        os.close(slave)
        seen = bytearray()
        try:
            os.write(master, b"tty; stty size; echo $TERM $((6*7))\n")
            out = _read_until(master, b"xterm 42", seen)
            assert b"/dev/pts/0\r\n" in out  # a terminal of the container's own /dev
            assert b"33 101" in out  # kubectl's resize reached the container's terminal
            os.write(master, b"exit 5\n")
            assert proc.wait(timeout=20) == 5
        finally:
            proc.kill()
            proc.wait()
            os.close(master)


def _close(resp: Any) -> None:
    """Close a client session: ``WSClient.close`` leaves the socket open once the server
    has ended the session (websocket-client's ``close`` does nothing unless connected)."""
    resp.close()
    resp.sock.shutdown()


def test_client_stream_exec(process_cluster: EmbeddedCluster) -> None:
    k = Kubectl(process_cluster.kubeconfig)
    kubeconfig = str(process_cluster.kubeconfig)
    with (
        _running(k, "cl", "exec sleep 600"),
        config.new_client_from_config(config_file=kubeconfig) as api,
    ):
        v1 = client.CoreV1Api(api)
        command = ["sh", "-c", "read line; echo got $line; echo e >&2; exit 4"]
        session = {"command": command, "stdin": True, "stdout": True, "stderr": True}
        resp = stream(
            v1.connect_get_namespaced_pod_exec, "cl", "default", **session, tty=False,
            _preload_content=False,
        )  # fmt: skip
        resp.write_stdin("x\n")
        resp.run_forever(timeout=20)
        assert resp.read_stdout() == "got x\n"
        assert resp.read_stderr() == "e\n"
        assert resp.returncode == 4  # the client's reading of the error channel (it eats it)
        _close(resp)
        resp = stream(
            v1.connect_get_namespaced_pod_exec, "cl", "default", **session, tty=False,
            _preload_content=False,
        )  # fmt: skip
        resp.write_stdin("y\n")
        resp.run_forever(timeout=20)
        error = json.loads(resp.read_channel(3))
        _close(resp)
        assert error["reason"] == "NonZeroExitCode"
        assert error["details"]["causes"] == [{"reason": "ExitCode", "message": "4"}]
        assert error["message"] == (
            "command terminated with non-zero exit code: error executing command "
            "[sh -c read line; echo got $line; echo e >&2; exit 4], exit code 4"
        )
        resp = stream(
            v1.connect_get_namespaced_pod_exec, "cl", "default", command=["echo", "ok"],
            stdout=True, stderr=True, stdin=False, tty=False, _preload_content=False,
        )  # fmt: skip
        resp.run_forever(timeout=20)
        assert (resp.read_stdout(), resp.returncode) == ("ok\n", 0)
        _close(resp)


def test_exec_without_upgrade_is_400(process_cluster: EmbeddedCluster) -> None:
    k = Kubectl(process_cluster.kubeconfig)
    with admin_http(process_cluster.kubeconfig) as http, _running(k, "plain", "exec sleep 600"):
        exec_url = "/api/v1/namespaces/default/pods/{}/exec"
        r = http.post(exec_url.format("missing"), params={"command": "ls"})
        assert r.status_code == 404  # the pod is looked up first, as upstream
        r = http.get(exec_url.format("plain"), params={"command": "ls"})
        assert (r.status_code, r.json()["message"]) == (400, "Upgrade request required")
        assert r.json()["reason"] == "BadRequest"
        r = http.get(exec_url.format("plain"))
        assert r.json()["message"] == "you must specify at least 1 command"
        unbound = {
            "metadata": {"name": "unbound"},
            "spec": {
                "schedulerName": "nobody",  # stays unbound
                "containers": [{"name": "a", "image": "busybox"}, {"name": "b", "image": "b"}],
            },
        }
        assert http.post("/api/v1/namespaces/default/pods", json=unbound).status_code == 201
        r = http.get(exec_url.format("unbound"), params={"command": "ls"})
        assert r.json()["message"] == (
            "a container name must be specified for pod unbound, choose one of: ['a', 'b']"
        )
        r = http.get(exec_url.format("unbound"), params={"command": "ls", "container": "a"})
        assert r.json()["message"] == "pod unbound does not have a host assigned"
        log_url = "/api/v1/namespaces/default/pods/unbound/log"
        r = http.get(log_url, params={"follow": "true", "container": "a"})
        assert (r.status_code, r.text) == (200, "")  # an unbound pod's log: empty, at once
        http.delete("/api/v1/namespaces/default/pods/unbound")
        spdy = {"Connection": "Upgrade", "Upgrade": "SPDY/3.1"}
        r = http.post(exec_url.format("plain"), params={"command": "ls"}, headers=spdy)
        assert r.status_code == 400
        assert "over WebSocket only" in r.json()["message"]


def test_exec_on_a_virtual_node_says_nothing_runs_there() -> None:
    settings = ClusterSettings(nodes=1, node=NodeSettings(start_latency_s=0.01))
    with EmbeddedCluster(settings) as c:
        k = Kubectl(c.kubeconfig)
        with _running(k, "v", "true"):
            r = k.run("exec", "v", "--", "true", check=False)
            assert r.returncode != 0
            assert "under the virtual runtime: nothing runs there to exec into" in r.stderr


def _role(name: str, verb: str, account: str) -> str:
    rbac = "rbac.authorization.k8s.io"
    rules = [
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]},
        {"apiGroups": [""], "resources": ["pods/exec"], "verbs": [verb]},
    ]
    role = {"apiVersion": f"{rbac}/v1", "kind": "Role", "metadata": {"name": name}, "rules": rules}
    binding = {
        "apiVersion": f"{rbac}/v1",
        "kind": "RoleBinding",
        "metadata": {"name": name},
        "roleRef": {"apiGroup": rbac, "kind": "Role", "name": name},
        "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": "default"}],
    }
    return f"{json.dumps(role)}\n---\n{json.dumps(binding)}\n"


def test_exec_needs_create_on_pods_exec(tmp_path: Path) -> None:
    settings = ClusterSettings(
        server=ServerSettings(authorization="rbac"),
        nodes=1,
        node=NodeSettings(start_latency_s=0.01),
    )
    with EmbeddedCluster(settings) as c:
        assert c.server is not None
        admin = Kubectl(c.kubeconfig)
        with _running(admin, "v", "true"):
            sa = Kubectl(c.server.kubeconfig(tmp_path / "sa", service_account_user("default", "x")))
            admin.run("apply", "-f", "-", stdin=_role("exec-get", "get", "x"))
            r = sa.run("exec", "v", "--", "true", check=False)
            assert (
                'pods "v" is forbidden: User "system:serviceaccount:default:x" cannot create '
                'resource "pods/exec" in API group "" in the namespace "default"'
            ) in r.stderr
            admin.run("apply", "-f", "-", stdin=_role("exec-create", "create", "x"))
            r = sa.run("exec", "v", "--", "true", check=False)
            assert "nothing runs there" in r.stderr  # authorized: the node answers


def test_discovery_lists_exec_and_attach_as_upstream_does(tmp_path: Path) -> None:
    """``kubectl api-resources``' and the clients' view: ``pods/exec`` and ``pods/attach``
    with upstream's kinds and verbs (a WebSocket upgrade is a GET, checked as ``create``)."""
    with (
        EmbeddedCluster(ClusterSettings(nodes=1), workdir=tmp_path) as cluster,
        config.new_client_from_config(config_file=str(cluster.kubeconfig)) as ac,
    ):
        listed = client.CoreV1Api(ac).get_api_resources().resources
        subs = {r.name: (r.kind, sorted(r.verbs)) for r in listed if r.name.startswith("pods/")}
        assert subs["pods/exec"] == ("PodExecOptions", ["create", "get"])
        assert subs["pods/attach"] == ("PodAttachOptions", ["create", "get"])
        assert "pods/portforward" not in subs  # not served (docs/simcluster.md)
