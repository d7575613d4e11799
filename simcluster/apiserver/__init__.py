"""The simulated kube-apiserver: store, verbs, discovery and the HTTP front end."""

from simcluster.apiserver.auth import Authenticator, User, service_account_user, write_kubeconfig
from simcluster.apiserver.core import ApiCore
from simcluster.apiserver.http import ApiServer, ServerSettings
from simcluster.apiserver.listoptions import ListOptions

__all__ = [
    "ApiCore",
    "ApiServer",
    "Authenticator",
    "ListOptions",
    "ServerSettings",
    "User",
    "service_account_user",
    "write_kubeconfig",
]
