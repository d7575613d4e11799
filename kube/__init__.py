"""The Kubernetes client layer shared by the controller and the facade.

Everything in Sandman that talks to a Kubernetes API server goes through here:
:class:`KubeClient` (credentials via kr8s, requests via aiohttp, a lean bind transport, rate
limit, retries), one error hierarchy and resource paths (this package's face);
:mod:`kube.informer` and :mod:`kube.cache` (list-then-watch caches); :mod:`kube.contract`
(the labels and annotations that make a Pod a sandbox). It sits below both processes and
imports neither. See docs/controller.md, "The client".
"""

from kube.client import KubeClient, RequestObserver, WatchEvent
from kube.errors import (
    AlreadyExists,
    BadRequest,
    Conflict,
    Forbidden,
    Gone,
    Invalid,
    KubeError,
    NotFound,
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

__all__ = [
    "EVENTS",
    "LEASES",
    "NODES",
    "PODS",
    "AlreadyExists",
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
