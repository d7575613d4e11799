"""The verbs both Kubernetes clients offer, written once over their ``request``.

``KubeClient`` (kr8s credentials, aiohttp, for the controller and the facade) and
``LightClient`` (plain asyncio, for the node agent on every node) differ in transport, not in
what a get, list, create or merge patch sends; this base holds that part so the two cannot
drift. Which failures are worth a retry is the other part they share: :mod:`kube.retry`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from typing import Any

import msgspec

from kube.resources import Resource

__all__ = ["JSON", "MERGE_PATCH", "Verbs", "selectors"]

JSON = "application/json"
MERGE_PATCH = "application/merge-patch+json"


def selectors(label_selector: str | None, field_selector: str | None) -> dict[str, str]:
    query: dict[str, str] = {}
    if label_selector:
        query["labelSelector"] = label_selector
    if field_selector:
        query["fieldSelector"] = field_selector
    return query


class Verbs(ABC):
    """The base of a client that defines ``request`` and a JSON ``_decoder``."""

    _decoder: msgspec.json.Decoder[Any]

    def bearer_headers(self) -> dict[str, str]:
        """This client's ``Authorization`` header (its current token; {} for none): what a
        component presents to another's endpoint as its identity (kube/placement.py)."""
        return {}

    @abstractmethod
    async def request(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, str] | None = None,
        body: Any = None,
        content_type: str = JSON,
        idempotent: bool | None = None,
    ) -> Any:
        """One request: rate limited, retried as :mod:`kube.retry` says; the decoded JSON."""

    def _decode_error(self, raw: bytes) -> Any:
        try:
            return self._decoder.decode(raw)
        except msgspec.DecodeError:
            return raw.decode("utf-8", "replace")

    async def get(self, res: Resource, name: str, namespace: str | None = None) -> Any:
        return await self.request("GET", res.path(namespace, name))

    async def list(
        self,
        res: Resource,
        namespace: str | None = None,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
        limit: int = 0,
        continue_token: str | None = None,
        resource_version: str | None = None,
    ) -> Any:
        query = selectors(label_selector, field_selector)
        if limit:
            query["limit"] = str(limit)
        if continue_token:
            query["continue"] = continue_token
        if resource_version is not None:
            query["resourceVersion"] = resource_version
        return await self.request("GET", res.path(namespace), query=query)

    async def create(
        self, res: Resource, body: Mapping[str, Any], namespace: str | None = None
    ) -> Any:
        return await self.request("POST", res.path(namespace), body=body)

    async def patch(
        self, res: Resource, name: str, body: Mapping[str, Any], namespace: str | None = None
    ) -> Any:
        """JSON merge patch."""
        return await self.request(
            "PATCH", res.path(namespace, name), body=body, content_type=MERGE_PATCH
        )
