"""Where the cri runtime's pod cgroups go and what they hold, on both cgroup layouts.

The real thing (pids.max refusing forks in a real container) is tests/cri/test_limits.py on
this machine's cgroup v1; here the layout is checked against a directory shaped like each
hierarchy (v1: one directory per controller; v2: one unified tree whose parents must enable
the pids controller for their children), and the profile key that sets the limit.
"""

from __future__ import annotations

from pathlib import Path

from simcluster.kubelet.podcgroup import PodCgroups
from simcluster.profile import load_profile


def test_v1_puts_the_limit_in_the_pids_hierarchy(tmp_path: Path) -> None:
    (tmp_path / "pids").mkdir()
    cgroups = PodCgroups("simcluster-ab", 64, tmp_path)
    assert not cgroups.unified
    assert cgroups.create("u1") == "/simcluster-ab/podu1"
    assert (tmp_path / "pids" / "simcluster-ab" / "podu1" / "pids.max").read_text() == "64"


def test_v2_enables_pids_down_the_tree_and_no_limit_is_max(tmp_path: Path) -> None:
    (tmp_path / "cgroup.controllers").write_text("cpu memory pids\n")
    (tmp_path / "cgroup.subtree_control").write_text("cpu memory\n")
    node = tmp_path / "simcluster-ab"
    node.mkdir()
    (node / "cgroup.subtree_control").write_text("")
    cgroups = PodCgroups("simcluster-ab", 0, tmp_path)
    assert cgroups.unified
    assert cgroups.create("u2") == "/simcluster-ab/podu2"
    assert (tmp_path / "cgroup.subtree_control").read_text() == "+pids"
    assert (node / "cgroup.subtree_control").read_text() == "+pids"
    assert (node / "podu2" / "pids.max").read_text() == "max"


def test_the_profile_key_sets_the_pod_pids_limit() -> None:
    assert load_profile("cri").node.pod_pids_limit == 1024
    assert load_profile("cri", {"nodes.pod_pids_limit": "64"}).node.pod_pids_limit == 64
    interval = load_profile("cri", {"nodes.storage_check_interval_s": "0.5"})
    assert interval.node.storage_check_interval_s == 0.5
