"""The bootstrap RBAC objects a real cluster starts with (the ones that matter here).

With RBAC enforced, a user with no bindings can still discover the API, ask what it may do
and read health and version — upstream grants that to every authenticated user through
``system:discovery``, ``system:basic-user`` and ``system:public-info-viewer``; ``/metrics``
needs ``system:monitoring`` (bound to that group) or a rule of one's own. ``cluster-admin``
is bound to ``system:masters`` (who are allowed anyway, by the privileged-group rule) and is
the role an operator binds for a full-access user; ``system:kube-scheduler`` (bound to that
user) is what simcluster's default scheduler needs of upstream's role of that name. The rules
are upstream's (``plugin/pkg/auth/authorizer/rbac/bootstrappolicy``) for these roles. The
aggregated ``admin``/``edit``/``view`` roles are not written out: bind explicit rules instead.
"""

from __future__ import annotations

from typing import Any

__all__ = ["bootstrap_objects"]

Obj = dict[str, Any]

_META = {
    "labels": {"kubernetes.io/bootstrapping": "rbac-defaults"},
    "annotations": {"rbac.authorization.kubernetes.io/autoupdate": "true"},
}
_DISCOVERY_URLS = [
    "/api", "/api/*", "/apis", "/apis/*", "/healthz", "/livez", "/openapi", "/openapi/*",
    "/readyz", "/version", "/version/",
]  # fmt: skip
_PUBLIC_URLS = ["/healthz", "/livez", "/readyz", "/version", "/version/"]
_MONITORING_URLS = [
    "/healthz", "/healthz/*", "/livez", "/livez/*", "/metrics", "/metrics/slis", "/readyz",
    "/readyz/*",
]  # fmt: skip


def _role(name: str, rules: list[Obj]) -> Obj:
    return {"metadata": {"name": name, **_META}, "rules": rules}


def _binding(name: str, role: str, groups: list[str], kind: str = "Group") -> Obj:
    return {
        "metadata": {"name": name, **_META},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
        "subjects": [
            {"apiGroup": "rbac.authorization.k8s.io", "kind": kind, "name": g} for g in groups
        ],
    }


#: What simcluster's default scheduler (simcluster/scheduler/) does, of upstream's
#: ``system:kube-scheduler`` rules: read nodes and pods, bind, write pod status and events.
_SCHEDULER_RULES = [
    {
        "apiGroups": ["", "events.k8s.io"],
        "resources": ["events"],
        "verbs": ["create", "patch", "update"],
    },
    {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "watch"]},
    {"apiGroups": [""], "resources": ["pods"], "verbs": ["delete", "get", "list", "watch"]},
    {"apiGroups": [""], "resources": ["bindings", "pods/binding"], "verbs": ["create"]},
    {"apiGroups": [""], "resources": ["pods/status"], "verbs": ["patch", "update"]},
]  # fmt: skip


def bootstrap_objects() -> list[tuple[str, Obj]]:
    """(plural in rbac.authorization.k8s.io, object) in the order they are created."""
    authenticated = ["system:authenticated"]
    return [
        (
            "clusterroles",
            _role(
                "cluster-admin",
                [
                    {"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]},
                    {"nonResourceURLs": ["*"], "verbs": ["*"]},
                ],
            ),
        ),
        (
            "clusterroles",
            _role("system:discovery", [{"nonResourceURLs": _DISCOVERY_URLS, "verbs": ["get"]}]),
        ),
        (
            "clusterroles",
            _role(
                "system:basic-user",
                [
                    {
                        "apiGroups": ["authorization.k8s.io"],
                        "resources": ["selfsubjectaccessreviews", "selfsubjectrulesreviews"],
                        "verbs": ["create"],
                    },
                    {
                        "apiGroups": ["authentication.k8s.io"],
                        "resources": ["selfsubjectreviews"],
                        "verbs": ["create"],
                    },
                ],
            ),
        ),
        (
            "clusterroles",
            _role(
                "system:public-info-viewer", [{"nonResourceURLs": _PUBLIC_URLS, "verbs": ["get"]}]
            ),
        ),
        (
            "clusterroles",
            _role("system:monitoring", [{"nonResourceURLs": _MONITORING_URLS, "verbs": ["get"]}]),
        ),
        ("clusterroles", _role("system:kube-scheduler", _SCHEDULER_RULES)),
        ("clusterrolebindings", _binding("cluster-admin", "cluster-admin", ["system:masters"])),
        (
            "clusterrolebindings",
            _binding("system:monitoring", "system:monitoring", ["system:monitoring"]),
        ),
        ("clusterrolebindings", _binding("system:discovery", "system:discovery", authenticated)),
        ("clusterrolebindings", _binding("system:basic-user", "system:basic-user", authenticated)),
        (
            "clusterrolebindings",
            _binding(
                "system:public-info-viewer",
                "system:public-info-viewer",
                ["system:authenticated", "system:unauthenticated"],
            ),
        ),
        (
            "clusterrolebindings",
            _binding(
                "system:kube-scheduler", "system:kube-scheduler", ["system:kube-scheduler"], "User"
            ),
        ),
    ]
