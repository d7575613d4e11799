"""Pod cgroups of the ``cri`` runtime: the kubelet's ``podPidsLimit``, made real.

Why: a fork bomb in one sandbox must leave its node usable. A real kubelet (cgroupfs
driver) creates a cgroup per pod under its node's ``kubepods`` cgroup, writes
``pids.max`` = ``podPidsLimit`` there, and hands the path to the runtime as the sandbox's
``cgroup_parent``: runc puts the pause container and every container of the pod below it,
so the limit counts every process of the pod together. CRI itself has no PID limit field.
This module does the kubelet's part: one cgroup per node (``<root>/simcluster-<id>``), one
per pod below it (``pod<uid>``) with ``pids.max``, removed with the pod.

The path is a cgroupfs one, for a runtime with the cgroupfs driver (runc's default, and
devstack's containerd); a runtime with ``SystemdCgroup = true`` would need a systemd slice
name instead, and refuses the sandbox (``CreatePodSandboxError``) otherwise.

cgroup v1 (this machine: one hierarchy per controller) holds ``pids.max`` in the ``pids``
hierarchy; runc creates the same relative path in every other controller it uses, so those
directories are removed too (the empty ones: runc removed its containers' leaves). cgroup
v2 (one unified hierarchy) needs the ``pids`` controller enabled in each parent's
``cgroup.subtree_control``.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from pathlib import Path

__all__ = ["CgroupError", "PodCgroups"]

CGROUP_ROOT = Path("/sys/fs/cgroup")


class CgroupError(OSError):
    """The pod cgroup could not be created or limited (no permission, no pids controller)."""


@dataclass(frozen=True, slots=True)
class PodCgroups:
    """The node's cgroup (``name``, relative to each hierarchy) and its pods' below it."""

    name: str
    pids_limit: int  # pids.max of every pod; <= 0: no limit ("max")
    root: Path = CGROUP_ROOT

    @property
    def unified(self) -> bool:
        """cgroup v2 mounted at the root (else v1, or hybrid: per-controller hierarchies)."""
        return (self.root / "cgroup.controllers").exists()

    def _pids_dir(self) -> Path:
        return self.root if self.unified else self.root / "pids"

    def parent(self, uid: str) -> str:
        """The pod's ``cgroup_parent`` for RunPodSandbox (a cgroupfs path)."""
        return f"/{self.name}/pod{uid}"

    def pod_dir(self, uid: str) -> Path:
        return self._pids_dir() / self.name / f"pod{uid}"

    def create(self, uid: str) -> str:
        """The pod's cgroup with its ``pids.max``; returns its ``cgroup_parent``."""
        node = self._pids_dir() / self.name
        pod = node / f"pod{uid}"
        try:
            node.mkdir(exist_ok=True)
            if self.unified:
                _enable_pids(self.root)
                _enable_pids(node)
            pod.mkdir(exist_ok=True)
            limit = str(self.pids_limit) if self.pids_limit > 0 else "max"
            (pod / "pids.max").write_text(limit)
        except OSError as e:
            raise CgroupError(e.errno, f"pod cgroup {pod}: {e.strerror}") from e
        return self.parent(uid)

    def pids_current(self, uid: str) -> int:
        return int((self.pod_dir(uid) / "pids.current").read_text())

    def remove(self, uid: str) -> None:
        """The pod's cgroup in every hierarchy that has it (after its containers are gone)."""
        for hierarchy in self._hierarchies():
            _rmdir_tree(hierarchy / self.name / f"pod{uid}")

    def close(self) -> None:
        """The node's cgroup, once its pods' are gone."""
        for hierarchy in self._hierarchies():
            _rmdir_tree(hierarchy / self.name)

    def _hierarchies(self) -> list[Path]:
        if self.unified:
            return [self.root]
        with contextlib.suppress(OSError):
            return [p for p in self.root.iterdir() if p.is_dir() and not p.is_symlink()]
        return []


def _enable_pids(directory: Path) -> None:
    control = directory / "cgroup.subtree_control"
    if "pids" not in control.read_text().split():
        control.write_text("+pids")


def _rmdir_tree(directory: Path) -> None:
    """Remove an empty cgroup directory tree bottom-up (a cgroup is removed with rmdir; its
    interface files go with it). A cgroup still holding processes stays."""
    if not directory.is_dir():
        return
    for sub, _dirs, _files in sorted(os.walk(directory), key=lambda w: -len(w[0])):
        with contextlib.suppress(OSError):
            os.rmdir(sub)
