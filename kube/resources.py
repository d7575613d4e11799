"""Resource types and API paths (``/api/v1/namespaces/ns/pods/name/binding``).

The controller uses a handful of built-in kinds; naming them as values keeps path building
in one place instead of string formatting at every call site.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import quote

__all__ = ["EVENTS", "LEASES", "NODES", "PODS", "TOKEN_REVIEWS", "Resource"]


@dataclass(frozen=True, slots=True)
class Resource:
    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool = True

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    def path(self, namespace: str | None = None, name: str | None = None, sub: str = "") -> str:
        base = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        if self.namespaced and namespace:
            base += f"/namespaces/{_segment(namespace)}"
        base += f"/{self.plural}"
        if name is not None:
            base += f"/{_segment(name)}"
            if sub:
                base += f"/{sub}"
        return base


#: What needs no escaping in a path segment: every valid object name and namespace.
_PLAIN = re.compile(r"[A-Za-z0-9._~-]*")


def _segment(value: str) -> str:
    """``quote(value, safe="")``, skipped for the names Kubernetes allows (every bind builds
    a path, and ``quote`` is several times slower than this check)."""
    return value if _PLAIN.fullmatch(value) else quote(value, safe="")


PODS = Resource("", "v1", "pods", "Pod")
NODES = Resource("", "v1", "nodes", "Node", namespaced=False)
EVENTS = Resource("", "v1", "events", "Event")
LEASES = Resource("coordination.k8s.io", "v1", "leases", "Lease")
#: A virtual resource: POST answers whose a bearer token is (controller/placement_auth.py).
TOKEN_REVIEWS = Resource(
    "authentication.k8s.io", "v1", "tokenreviews", "TokenReview", namespaced=False
)
