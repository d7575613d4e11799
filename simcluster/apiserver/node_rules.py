"""What a kubelet may do: upstream's Node authorizer (plus the NodeRestriction rule that a
node writes only its own Node and Lease), for the identities ``system:node:<name>`` in the
group ``system:nodes``.

Upstream decides reads of secrets, configmaps and volumes by a graph of the pods bound to the
node; simcluster's kubelets read none of them, so they get the plain verbs here without the
graph (documented as a difference). A request these rules do not allow is not refused by
them: it goes on to RBAC, as in the real authorizer chain.
"""

from __future__ import annotations

from typing import Protocol

from simcluster.apiserver.auth import User

__all__ = ["node_allows", "node_name"]


class _Attributes(Protocol):
    """rbac.Attributes (which imports this module)."""

    @property
    def user(self) -> User: ...
    @property
    def verb(self) -> str: ...
    @property
    def resource_request(self) -> bool: ...
    @property
    def group(self) -> str: ...
    @property
    def resource(self) -> str: ...
    @property
    def subresource(self) -> str: ...
    @property
    def namespace(self) -> str: ...
    @property
    def name(self) -> str: ...


_READ = frozenset({"get", "list", "watch"})
_WRITE = frozenset({"create", "update", "patch"})
#: (group, resource, subresource) -> verbs any node may use on any such object
_ANY_OBJECT: dict[tuple[str, str, str], frozenset[str]] = {
    ("", "nodes", ""): _READ | {"create"},
    ("", "pods", ""): _READ | {"create", "delete"},
    ("", "pods", "status"): frozenset({"get", "update", "patch"}),
    ("", "pods", "eviction"): frozenset({"create"}),
    ("", "events", ""): _WRITE,
    ("events.k8s.io", "events", ""): _WRITE,
    ("", "services", ""): _READ,
    ("", "endpoints", ""): _READ,
    ("", "configmaps", ""): frozenset({"get", "watch", "list"}),
    ("", "secrets", ""): frozenset({"get", "watch", "list"}),
    ("", "persistentvolumeclaims", ""): frozenset({"get"}),
    ("", "persistentvolumes", ""): frozenset({"get"}),
    ("", "serviceaccounts", "token"): frozenset({"create"}),
    ("storage.k8s.io", "csinodes", ""): _READ | _WRITE | {"delete"},
    ("storage.k8s.io", "csidrivers", ""): _READ,
    ("node.k8s.io", "runtimeclasses", ""): _READ,
    ("certificates.k8s.io", "certificatesigningrequests", ""): _READ | {"create"},
    ("authentication.k8s.io", "tokenreviews", ""): frozenset({"create"}),
    ("authorization.k8s.io", "subjectaccessreviews", ""): frozenset({"create"}),
}
#: its own Node and Lease: (group, resource, subresource) -> verbs, name must be the node's
_OWN_OBJECT: dict[tuple[str, str, str], frozenset[str]] = {
    ("", "nodes", ""): frozenset({"update", "patch", "delete"}),
    ("", "nodes", "status"): frozenset({"get", "update", "patch"}),
    ("coordination.k8s.io", "leases", ""): frozenset({"get", "update", "patch", "delete"}),
}


def node_name(user_name: str, groups: tuple[str, ...]) -> str | None:
    """The node a user is, or None: ``system:node:<name>`` in ``system:nodes``."""
    if "system:nodes" not in groups or not user_name.startswith("system:node:"):
        return None
    return user_name.removeprefix("system:node:") or None


def node_allows(a: _Attributes) -> bool:
    node = node_name(a.user.name, a.user.groups)
    if node is None or not a.resource_request:
        return False
    key = (a.group, a.resource, a.subresource)
    if a.verb in _ANY_OBJECT.get(key, ()):
        return True
    if key == ("coordination.k8s.io", "leases", "") and a.namespace == "kube-node-lease":
        # create carries no name in its URL; NodeRestriction checks the body's
        return a.verb == "create" or (a.verb in _OWN_OBJECT[key] and a.name == node)
    return a.verb in _OWN_OBJECT.get(key, ()) and a.name == node
