"""The CLI and profiles: `python -m simcluster up` starts a cluster from a profile, prints
the kubeconfig, reports progress, takes faults, and Ctrl-C stops everything it started."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from simcluster.profile import ProfileError, builtin_profiles, load_profile
from tests.support.kubectl import Kubectl
from tests.support.wait import wait_until


def test_paper_burst_profile_carries_the_design_numbers() -> None:
    s = load_profile("paper-burst")
    assert s.nodes == 400
    assert (s.node.cpu, s.node.memory, s.node.max_pods) == ("16", "64Gi", 110)
    assert s.foreign_fraction == pytest.approx(0.3)
    assert s.server.write_latency_s == pytest.approx(0.005)
    assert s.server.flowcontrol["levels"]["sandman"]["mutating"]["rate"] == 500
    assert s.node.creation_rate == pytest.approx(4.5)
    assert s.node.start_latency_s == pytest.approx(1.2)
    assert 19 <= s.node.pull.latency("any/task-image:1") <= 22  # absent image: ~20 s
    assert set(builtin_profiles()) >= {"ci", "dev", "paper-burst"}


def test_profile_errors_name_the_bad_key(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("nodes: {count: 1, cpu_typo: 3}\n")
    with pytest.raises(ProfileError, match="nodes: unknown key"):
        load_profile(str(bad))
    with pytest.raises(ProfileError, match="no profile"):
        load_profile("nope")
    assert load_profile("ci", {"nodes.count": "7"}).nodes == 7


def test_up_prints_kubeconfig_and_ctrl_c_stops_everything(tmp_path: Path) -> None:
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "simcluster",
            "up",
            "--profile",
            "ci",
            "--workdir",
            str(tmp_path),
            "--status-every",
            "0.5",
            "--authorization",
            "rbac",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
    )
    try:
        assert proc.stdout is not None
        lines: list[str] = []

        def printed_kubeconfig() -> bool:
            assert proc.stdout is not None
            lines.append(proc.stdout.readline())  # blocks until a line (or the end) comes
            if proc.poll() is not None:
                pytest.fail(f"simcluster exited with {proc.returncode}: {lines}")
            assert "export KUBECONFIG" in lines[-1], lines[-3:]
            return True

        wait_until(printed_kubeconfig, timeout_s=30, interval_s=0.001)
        assert any("nodes ready: 3/3" in line for line in lines)
        kubectl = Kubectl(tmp_path / "kubeconfig")
        assert kubectl.run("get", "nodes").stdout.count("Ready") == 3
        # --authorization rbac: the profile's service account has no bindings yet
        denied = Kubectl(tmp_path / "kubeconfig-sandman").run("get", "nodes", check=False)
        assert 'User "system:serviceaccount:sandman-system:sandman-controller" cannot list' in (
            denied.stderr
        )
        fault = subprocess.run(
            [
                sys.executable,
                "-m",
                "simcluster",
                "fault",
                "--kubeconfig",
                str(tmp_path / "kubeconfig"),
                "kubelet-pause",
                "node=node-1",
            ],
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert fault.returncode == 0, fault.stderr
        assert '"paused": true' in fault.stdout
        status = proc.stdout.readline()
        assert "nodes=3 pods:" in status
        proc.send_signal(signal.SIGINT)
        rest = proc.stdout.read()
        assert proc.wait(timeout=20) == 0
        assert "stopped" in rest
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()
