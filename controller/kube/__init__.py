"""The Kubernetes client layer: everything in the controller talks to the API through here.

:class:`KubeClient` (credentials via kr8s, requests via aiohttp, rate limit, retries),
one error hierarchy, and resource paths. See docs/controller.md, "The client".
"""

from controller.kube.client import KubeClient, RequestObserver, WatchEvent
from controller.kube.errors import (
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
from controller.kube.ratelimit import TokenBucket
from controller.kube.resources import EVENTS, LEASES, NODES, PODS, Resource
from controller.kube.settings import ClientSettings, Timeouts

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
