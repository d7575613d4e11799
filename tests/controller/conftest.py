"""Fixtures for controller tests: a real simcluster API server on loopback and a real
KubeClient (shared with tests/kube, in tests/support/kube.py)."""

from tests.support.kube import client, cluster, cluster_settings

__all__ = ["client", "cluster", "cluster_settings"]
