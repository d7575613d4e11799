"""Simulated kubelets and their container runtimes (virtual, process)."""

from simcluster.kubelet.images import ImageCache, PullSettings
from simcluster.kubelet.kubelet import Kubelet
from simcluster.kubelet.process import ProcessRuntime, ProcessSettings
from simcluster.kubelet.runtime import (
    Container,
    Mount,
    Probe,
    Runtime,
    RuntimeStartError,
    Sandbox,
    VirtualRuntime,
)
from simcluster.kubelet.settings import NodeSettings

__all__ = [
    "Container",
    "ImageCache",
    "Kubelet",
    "Mount",
    "NodeSettings",
    "Probe",
    "ProcessRuntime",
    "ProcessSettings",
    "PullSettings",
    "Runtime",
    "RuntimeStartError",
    "Sandbox",
    "VirtualRuntime",
]
