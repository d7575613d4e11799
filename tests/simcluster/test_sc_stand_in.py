"""The stand-in daemon of ``nodes.virtual_daemon``: a virtual-runtime pod that carries the
sandbox daemon's credentials answers the claim protocol on its pod IP from its start to its
stop (simcluster/kubelet/stand_in.py); with the knob off, or for a pod without the daemon's
env, nothing listens."""

from __future__ import annotations

import hashlib
from pathlib import Path

import httpx
import pytest
from kubernetes import client, config

from simcluster.cluster import ClusterSettings
from simcluster.embedded import EmbeddedCluster
from simcluster.kubelet.settings import NodeSettings
from simcluster.profile import ProfileError, load_profile
from tests.support.wait import wait_until

POOL_TOKEN = "pool-token-0123456789"
PORT = 8790


def _pod(name: str, env: list[dict]) -> dict:
    return {
        "metadata": {"name": name},
        "spec": {
            "nodeName": "node-0",
            "containers": [
                {
                    "name": "sandbox",
                    "image": "python:3.11",
                    "env": env,
                    "readinessProbe": {"httpGet": {"path": "/healthz", "port": PORT}},
                }
            ],
        },
    }


def _pool_env() -> list[dict]:
    digest = hashlib.sha256(POOL_TOKEN.encode()).hexdigest()
    return [
        {"name": "SANDMAN_TOKEN_SHA256", "value": digest},
        {"name": "SANDMAN_POOLED", "value": "1"},
    ]


def _ready_ip(v1: client.CoreV1Api, name: str) -> str:
    def ready() -> str | None:
        pod = v1.read_namespaced_pod(name, "default")
        conds = {c.type: c.status for c in pod.status.conditions or []}
        return pod.status.pod_ip if conds.get("Ready") == "True" else None

    return wait_until(ready, timeout_s=20, what=f"{name} ready")


def _refused(url: str) -> bool:
    try:
        httpx.get(url, timeout=1)
    except httpx.ConnectError:
        return True
    return False


def _cluster(tmp_path: Path, on: bool) -> EmbeddedCluster:
    settings = ClusterSettings(nodes=1, node=NodeSettings(virtual_daemon=on))
    return EmbeddedCluster(settings, workdir=tmp_path)


def test_a_pool_pod_answers_its_claim_on_its_ip_until_it_is_deleted(tmp_path: Path) -> None:
    with (
        _cluster(tmp_path, True) as cluster,
        config.new_client_from_config(config_file=str(cluster.kubeconfig)) as ac,
    ):
        v1 = client.CoreV1Api(ac)
        v1.create_namespaced_pod("default", _pod("pool-0", _pool_env()))
        base = f"http://{_ready_ip(v1, 'pool-0')}:{PORT}"
        assert httpx.get(f"{base}/healthz").json() == {"status": "ok"}
        pool = {"authorization": f"Bearer {POOL_TOKEN}"}
        before = httpx.post(f"{base}/v1/exec", headers=pool, json={"argv": ["true"]})
        assert (before.status_code, before.json()["error"]["reason"]) == (409, "sandbox_unclaimed")
        claim = {"claim": "c-1", "token": "sandbox-token-0123456789", "env": {"A": "1"}}
        assert httpx.post(f"{base}/v1/claim", headers=pool, json=claim).status_code == 204
        assert httpx.post(f"{base}/v1/claim", headers=pool, json=claim).status_code == 204
        other = httpx.post(f"{base}/v1/claim", headers=pool, json={**claim, "claim": "c-2"})
        assert (other.status_code, other.json()["error"]["reason"]) == (409, "already_claimed")
        own = {"authorization": "Bearer sandbox-token-0123456789"}
        after = httpx.post(f"{base}/v1/exec", headers=own, json={"argv": ["true"]})
        assert (after.status_code, after.json()["error"]["reason"]) == (501, "not_simulated")
        v1.delete_namespaced_pod("pool-0", "default", grace_period_seconds=0)
        wait_until(lambda: _refused(f"{base}/healthz"), timeout_s=20, what="the listener closed")


def test_without_the_knob_or_the_daemon_env_nothing_listens(tmp_path: Path) -> None:
    for on, env in ((False, _pool_env()), (True, [{"name": "OTHER", "value": "x"}])):
        with (
            _cluster(tmp_path / str(on), on) as cluster,
            config.new_client_from_config(config_file=str(cluster.kubeconfig)) as ac,
        ):
            v1 = client.CoreV1Api(ac)
            v1.create_namespaced_pod("default", _pod("plain", env))
            assert _refused(f"http://{_ready_ip(v1, 'plain')}:{PORT}/healthz")
            assert cluster.cluster.stand_in is None or cluster.cluster.stand_in.listening == 0


def test_the_knob_is_a_profile_boolean() -> None:
    settings = load_profile("paper-burst", {"nodes.virtual_daemon": "true"})
    assert settings.node.virtual_daemon
    assert all(p.node.virtual_daemon for p in settings.pools)
    with pytest.raises(ProfileError, match="virtual_daemon"):
        load_profile("paper-burst", {"nodes.virtual_daemon": "'no'"})
