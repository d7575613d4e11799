"""Kubelet-side metrics, published in the API server's registry (one /metrics for all):
pod starts and their latency from admission to Running, admission rejections by reason,
image pulls. A burst report reads the start-latency histogram next to the API counters."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram

__all__ = ["KubeletMetrics"]


class KubeletMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.starts = Counter(
            "simcluster_kubelet_pod_starts",
            "Pods a simulated kubelet brought to Running.",
            registry=registry,
        )
        self.start_seconds = Histogram(
            "simcluster_kubelet_pod_start_seconds",
            "From kubelet admission to the Running status write (creation limit, pull, start).",
            buckets=(0.1, 0.25, 0.5, 1, 1.5, 2, 3, 5, 10, 20, 30, 60, 120),
            registry=registry,
        )
        self.rejections = Counter(
            "simcluster_kubelet_admission_rejections",
            "Pods rejected by kubelet admission (OutOfcpu, OutOfmemory, OutOfpods).",
            ["reason"],
            registry=registry,
        )
        self.pod_errors = Counter(
            "simcluster_kubelet_pod_errors",
            "Pods failed for an error the kubelet did not expect (a spec it cannot handle).",
            ["stage"],
            registry=registry,
        )
        self.pulls = Counter(
            "simcluster_kubelet_image_pulls", "Image pulls completed.", registry=registry
        )
