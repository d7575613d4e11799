"""A KWOK-style simulated Kubernetes cluster that speaks the real API.

A test bed and the embedded default, never a production path. The pieces:

- ``simcluster.apiserver``: the API server (store, verbs, discovery, flow control, HTTPS);
- ``simcluster.kubelet``: one simulated kubelet per Node and the container runtimes;
- ``simcluster.cluster.Cluster``: server + kubelets + node faults, from ``ClusterSettings``;
- ``simcluster.profile``: profiles (YAML) -> ``ClusterSettings``;
- ``simcluster.embedded.EmbeddedCluster``: a cluster on a background thread;
- ``python -m simcluster`` (CLI) and ``python -m load.bench.simcluster``.

See docs/simcluster.md.
"""

from simcluster.cluster import Cluster, ClusterSettings
from simcluster.embedded import EmbeddedCluster
from simcluster.errors import ApiError, SimclusterError
from simcluster.profile import ProfileError, load_profile

__all__ = [
    "ApiError",
    "Cluster",
    "ClusterSettings",
    "EmbeddedCluster",
    "ProfileError",
    "SimclusterError",
    "load_profile",
]
