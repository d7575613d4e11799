"""A simulated node's settings, in a module of their own.

Both the kubelet (pods, admission, image pulls) and its node presence (Node and Lease
objects) read these settings; keeping them here rather than in ``kubelet`` lets ``node``
import them without importing the kubelet that imports ``node`` — a circle otherwise.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from simcluster.kubelet.images import PullSettings

__all__ = ["NodeSettings"]


@dataclass(frozen=True, slots=True)
class NodeSettings:
    cpu: str = "16"
    memory: str = "64Gi"
    max_pods: int = 110
    labels: Mapping[str, str] = field(default_factory=dict)
    taints: tuple[Mapping[str, Any], ...] = ()
    creation_rate: float = 0.0  # sandbox creations/s per node; 0 = unlimited
    creation_concurrency: int = 0  # sandboxes being created at once; 0 = unlimited
    start_latency_s: float = 0.0  # container start with the image present
    start_jitter_s: float = 0.0  # uniform +/- jitter on the start latency
    pull: PullSettings = field(default_factory=PullSettings)
    preloaded_images: tuple[str, ...] = ()
    lease_interval_s: float = 10.0
    status_interval_s: float = 60.0
    restart_backoff_s: float = 10.0  # first CrashLoopBackOff delay, doubling up to 300 s
    #: The kubelet's ``podPidsLimit``: ``pids.max`` of every pod's cgroup (the ``cri``
    #: runtime enforces it, simcluster/kubelet/podcgroup.py); <= 0: unlimited. Upstream's
    #: default is unlimited; 1024 is what it suggests for nodes running untrusted pods.
    pod_pids_limit: int = 1024
    #: How often the kubelet compares each pod's local ephemeral storage with its limit
    #: (upstream's housekeeping period: 10 s), where the runtime can measure it (storage.py).
    storage_check_interval_s: float = 10.0
    kubelet_version: str = "v1.32.0-simcluster"
    #: On the ``virtual`` runtime: a stand-in for the sandbox daemon behind every pod that
    #: carries one (its claim and health routes; tool calls are not simulated), so pooled
    #: sandboxes can be claimed at the reference burst's scale (kubelet/stand_in.py).
    virtual_daemon: bool = False
