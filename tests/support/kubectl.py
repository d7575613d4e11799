"""Real clients of a simcluster API server besides the Python ones: the kubectl binary
(client-go, found as the devstack finds it), and an httpx client with the kubeconfig's
credentials for /admin and /metrics."""

from __future__ import annotations

import base64
import json
import os
import ssl
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from devstack.manifests import ManifestsError
from devstack.manifests import kubectl_path as devstack_kubectl

__all__ = ["Kubectl", "admin_http", "kubectl_path"]


def kubectl_path() -> str:
    """The kubectl the devstack runs (``devstack.manifests.kubectl_path``: $KUBECTL, the
    venv's, PATH's); none fails the test with how to install it."""
    try:
        return devstack_kubectl()
    except ManifestsError as e:
        pytest.fail(str(e))


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

    def popen(self, *args: str, **kwargs: Any) -> subprocess.Popen[str]:
        """kubectl running in the background (a watch, a create that will be retried)."""
        env = dict(os.environ, KUBECONFIG=str(self.kubeconfig))
        return subprocess.Popen([kubectl_path(), *args], text=True, env=env, **kwargs)


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
