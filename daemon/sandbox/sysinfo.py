"""What the sandbox's container may use and is using, read from cgroups (v1 and v2).

Trainers use this to size work (how many parallel test processes fit) and operators to see
whether sandboxes run into their limits. The daemon reads its own cgroup (``/proc/self/cgroup``)
so the figures are the container's, whether or not a cgroup namespace is in place.
"""

from __future__ import annotations

import os
import resource
from typing import Literal

from sandman.wire.daemon import ResourceLimits, ResourceUsage

__all__ = ["CgroupReader"]

CGROUP_ROOT = "/sys/fs/cgroup"
UNLIMITED_MEMORY = 1 << 60  # v1 reports "no limit" as a huge page-rounded number


def _read(path: str) -> str | None:
    try:
        with open(path) as handle:
            return handle.read().strip()
    except OSError:
        return None


def _int(path: str) -> int | None:
    text = _read(path)
    if text is None or text == "max":
        return None
    try:
        return int(text.split()[0])
    except ValueError:
        return None


class CgroupReader:
    def __init__(self, root: str = CGROUP_ROOT, membership: str = "/proc/self/cgroup") -> None:
        self._root = root
        self._membership = membership
        self._paths = self._own_paths()
        self.version: Literal[1, 2] | None = (
            2 if "" in self._paths else (1 if self._paths else None)
        )

    def _own_paths(self) -> dict[str, str]:
        """controller -> this process's cgroup directory ('' is the v2 unified hierarchy)."""
        paths: dict[str, str] = {}
        text = _read(self._membership) or ""
        for line in text.splitlines():
            _, controllers, rel = line.split(":", 2)
            for name in controllers.split(",") if controllers else [""]:
                mount = os.path.join(self._root, name) if name else self._root
                if name == "" and not os.path.exists(
                    os.path.join(self._root, "cgroup.controllers")
                ):
                    continue
                candidate = os.path.join(mount, rel.lstrip("/"))
                paths[name] = candidate if os.path.isdir(candidate) else mount
        return paths

    def _file(self, controller: str, name: str) -> str:
        return os.path.join(self._paths.get(controller, self._root), name)

    def limits(self) -> ResourceLimits:
        if self.version == 2:
            memory = _int(self._file("", "memory.max"))
            cpu = _cpu_v2(_read(self._file("", "cpu.max")))
            pids = _int(self._file("", "pids.max"))
        elif self.version == 1:
            memory = _int(self._file("memory", "memory.limit_in_bytes"))
            memory = None if memory is not None and memory >= UNLIMITED_MEMORY else memory
            quota = _int(self._file("cpu", "cpu.cfs_quota_us"))
            period = _int(self._file("cpu", "cpu.cfs_period_us"))
            cpu = quota / period if quota and quota > 0 and period else None
            pids = _int(self._file("pids", "pids.max"))
        else:
            memory = cpu = pids = None
        return ResourceLimits(
            cgroup_version=self.version, memory_bytes=memory, cpu_cores=cpu, pids=pids
        )

    def usage(self) -> ResourceUsage:
        cpu: float | None
        if self.version == 2:
            memory = _int(self._file("", "memory.current"))
            usec = _stat_field(_read(self._file("", "cpu.stat")), "usage_usec")
            cpu = usec / 1e6 if usec is not None else None
            pids = _int(self._file("", "pids.current"))
        elif self.version == 1:
            memory = _int(self._file("memory", "memory.usage_in_bytes"))
            nsec = _int(self._file("cpuacct", "cpuacct.usage"))
            cpu = nsec / 1e9 if nsec is not None else None
            pids = _int(self._file("pids", "pids.current"))
        else:
            memory, cpu, pids = None, None, None
        rss = _own_rss()
        return ResourceUsage(memory_bytes=memory, cpu_seconds=cpu, pids=pids, daemon_rss_bytes=rss)


def _own_rss() -> int:
    for line in (_read("/proc/self/status") or "").splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _cpu_v2(text: str | None) -> float | None:
    if not text:
        return None
    quota, _, period = text.partition(" ")
    if quota == "max" or not period:
        return None
    return int(quota) / int(period)


def _stat_field(text: str | None, key: str) -> int | None:
    for line in (text or "").splitlines():
        name, _, value = line.partition(" ")
        if name == key:
            return int(value)
    return None
