"""Kubelet-side metrics, published in the API server's registry (one /metrics for all):
pod starts and their latency from admission to Running, admission rejections by reason,
image pulls (per image, and the most pulls of one image in flight at once across the
cluster: the registry fan-out), images removed by the image GC. A burst report reads the
start-latency histogram and the pull figures next to the API counters."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

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
        self.pulls_by_image = Counter(
            "simcluster_image_pulls_by_image",
            "Image pulls started, per normalised image, all nodes together.",
            ["image"],
            registry=registry,
        )
        self.pull_peak = Gauge(
            "simcluster_image_pull_peak_concurrency",
            "Most pulls of one image in flight at once across the cluster so far.",
            ["image"],
            registry=registry,
        )
        self.cri_pulls = Counter(
            "simcluster_cri_image_pulls",
            "Images the cri runtime pulled because a pod start found them absent in containerd.",
            ["image"],
            registry=registry,
        )
        self.gc_removed = Counter(
            "simcluster_kubelet_image_gc_removed",
            "Images removed by the simulated kubelets' image garbage collection.",
            registry=registry,
        )

    def pull_started(self, image: str, peak: int) -> None:
        """A pull of ``image`` started; ``peak``: the most of its pulls in flight so far."""
        self.pulls_by_image.labels(image).inc()
        self.pull_peak.labels(image).set(peak)
