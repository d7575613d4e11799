"""The Kubernetes client layer shared by the controller and the facade.

Everything in Sandman that talks to a Kubernetes API server goes through here:
:class:`KubeClient` (credentials via kr8s, requests via aiohttp, a lean bind transport, rate
limit), the node agent's :class:`kube.light.LightClient`, the one retry rule both follow
(:mod:`kube.retry`), one error hierarchy and resource paths (this package's face);
:mod:`kube.informer` and :mod:`kube.cache` (list-then-watch caches); :mod:`kube.contract`
(the labels and annotations that make a Pod a sandbox). It sits below both processes and
imports neither. See docs/controller.md, "The client".

:class:`KubeClient` is imported on first use (PEP 562), not with the package: it brings
kr8s and aiohttp (~40 MiB of RSS), and the node agent, which runs on every node under a
50 MiB budget, uses :mod:`kube.light` and the light modules here without them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kube.errors import (
    AlreadyExists,
    BadRequest,
    Conflict,
    Forbidden,
    Gone,
    Invalid,
    KubeError,
    NotFound,
    SendDeadlinePassed,
    ServerError,
    ServerTimeout,
    TooManyRequests,
    TransportError,
    Unauthorized,
    error_from_status,
    from_kr8s,
)
from kube.ratelimit import TokenBucket
from kube.resources import EVENTS, LEASES, NODES, PODS, Resource
from kube.settings import ClientSettings, Timeouts
from kube.watch import ApiClient, WatchEvent

if TYPE_CHECKING:
    from kube.client import KubeClient, RequestObserver

__all__ = [
    "EVENTS",
    "LEASES",
    "NODES",
    "PODS",
    "AlreadyExists",
    "ApiClient",
    "BadRequest",
    "ClientSettings",
    "Conflict",
    "Forbidden",
    "Gone",
    "Invalid",
    "KubeClient",
    "KubeError",
    "NotFound",
    "RequestObserver",
    "Resource",
    "SendDeadlinePassed",
    "ServerError",
    "ServerTimeout",
    "Timeouts",
    "TokenBucket",
    "TooManyRequests",
    "TransportError",
    "Unauthorized",
    "WatchEvent",
    "error_from_status",
    "from_kr8s",
]


def __getattr__(name: str) -> Any:
    if name in ("KubeClient", "RequestObserver"):
        from kube import client

        return getattr(client, name)
    raise AttributeError(f"module 'kube' has no attribute {name!r}")
