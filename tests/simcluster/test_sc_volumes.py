"""Where a container's volume is on this machine (simcluster/kubelet/runtime.py
``Mount.host_path``), the one rule of the ``process`` runtime's bubblewrap binds and the
``cri`` runtime's CRI mounts: a hostPath is itself; an emptyDir is a directory of the pod's
own under the runtime's pod directory, created on first use and the same on every use, so
two containers of a pod share it and removing ``<pod_dir>/<uid>`` removes it."""

from __future__ import annotations

from pathlib import Path

from simcluster.kubelet.runtime import Mount


def test_a_host_path_is_itself_and_creates_nothing(tmp_path: Path) -> None:
    mount = Mount(volume="bundle", target="/sandman", source="/opt/bundle", read_only=True)
    assert mount.host_path(tmp_path / "pods", "uid-1") == "/opt/bundle"
    assert not (tmp_path / "pods").exists()


def test_an_empty_dir_is_the_pods_own_directory(tmp_path: Path) -> None:
    pods = tmp_path / "pods"
    scratch = Mount(volume="scratch", target="/work")
    first = scratch.host_path(pods, "uid-1")
    assert first == str(pods / "uid-1" / "scratch") and Path(first).is_dir()
    (Path(first) / "kept").write_text("x")
    assert Mount(volume="scratch", target="/other").host_path(pods, "uid-1") == first
    assert (Path(first) / "kept").exists()  # a second use is the same directory, not a new one
    assert scratch.host_path(pods, "uid-2") != first  # another pod gets its own
