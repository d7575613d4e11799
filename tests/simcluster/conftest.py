"""Fixtures for simcluster tests: a real API server on loopback and real clients."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from simcluster.cluster import ClusterSettings
from simcluster.embedded import EmbeddedCluster
from simcluster.kubelet.settings import NodeSettings
from tests.support.kubectl import Kubectl


@pytest.fixture
def cluster() -> Iterator[EmbeddedCluster]:
    with EmbeddedCluster() as c:
        yield c


@pytest.fixture
def kubectl(cluster: EmbeddedCluster) -> Kubectl:
    return Kubectl(cluster.kubeconfig)


@pytest.fixture
def cluster_with_nodes() -> Iterator[Kubectl]:
    """kubectl against a cluster with two virtual nodes (ci-like latencies)."""
    settings = ClusterSettings(nodes=2, node=NodeSettings(start_latency_s=0.05))
    with EmbeddedCluster(settings) as c:
        yield Kubectl(c.kubeconfig)
