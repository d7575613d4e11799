"""The node agent's API calls, each counted by outcome, and the refused ones held until a
call of the same kind works again.

Why: an agent whose RBAC lost a rule (an operator's edit, a Role left behind by an upgrade)
used to log a warning per failed write and carry on — its Lease went stale, the controller
stopped planning for its node, and nothing but a warning said why. The controller and the
facade make a 403 loud (docs/operator-guide.md, "Permissions"), and so does the agent. Every
call through :class:`ApiAccess` is counted in
``sandman_node_agent_api_requests_total{verb,resource,code}``; a 403 is logged once, as an
error naming the missing permission the way an RBAC rule spells it, per (verb, resource,
namespace); and it is held in :attr:`ApiAccess.refused` until a call of that kind succeeds,
while the agent's ``/readyz`` answers 503 ``forbidden`` (daemon/node/app.py).

There is one per :class:`~daemon.node.agent.NodeAgent`, over a client that may be shared
(devstack runs many cores in one process over one client): each core's refusals are its own.
The wrapped client is called ``api`` here, so tests/manifests/test_rbac.py's scan of call
sites (``client.<verb>(``) finds the agent's calls where they are made, not in this module.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from daemon.node.metrics import AgentMetrics
from kube.errors import Forbidden, KubeError
from kube.light import LightClient
from kube.resources import Resource
from kube.watch import WatchEvent

__all__ = ["ApiAccess", "Permission"]

log = logging.getLogger(__name__)

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Permission:
    """One RBAC verb on one resource in one namespace ("" for cluster scope)."""

    verb: str
    group: str
    resource: str
    namespace: str

    @classmethod
    def of(cls, verb: str, res: Resource, namespace: str | None) -> Permission:
        return cls(verb, res.group, res.plural, (namespace or "") if res.namespaced else "")

    def __str__(self) -> str:
        qualified = f"{self.resource}.{self.group}" if self.group else self.resource
        where = f"in namespace {self.namespace}" if self.namespace else "cluster-wide"
        return f"{self.verb} on {qualified} {where}"

    def as_dict(self) -> dict[str, str]:
        return {
            "verb": self.verb,
            "group": self.group,
            "resource": self.resource,
            "namespace": self.namespace,
        }


class ApiAccess:
    """The calls the agent makes (``list``/``watch`` for its informer, ``create``/``patch``),
    delegated to ``api``, counted, with 403s held in :attr:`refused`."""

    def __init__(self, api: LightClient, metrics: AgentMetrics, who: str) -> None:
        self.api = api
        self.metrics = metrics
        self.who = who
        #: Permissions refused (403) and not used successfully since: their last message.
        self.refused: dict[Permission, str] = {}

    @property
    def namespace(self) -> str:
        return self.api.namespace

    # --- the verbs ----------------------------------------------------------------------
    async def create(
        self, res: Resource, body: Mapping[str, Any], namespace: str | None = None
    ) -> Any:
        return await self._call("create", res, namespace, self.api.create(res, body, namespace))

    async def patch(
        self, res: Resource, name: str, body: Mapping[str, Any], namespace: str | None = None
    ) -> Any:
        return await self._call("patch", res, namespace, self.api.patch(res, name, body, namespace))

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
        listing = self.api.list(
            res,
            namespace,
            label_selector=label_selector,
            field_selector=field_selector,
            limit=limit,
            continue_token=continue_token,
            resource_version=resource_version,
        )
        return await self._call("list", res, namespace, listing)

    @contextlib.asynccontextmanager
    async def watch(
        self,
        res: Resource,
        namespace: str | None = None,
        *,
        resource_version: str,
        label_selector: str | None = None,
        field_selector: str | None = None,
        timeout_seconds: int = 300,
        bookmarks: bool = True,
    ) -> AsyncIterator[AsyncIterator[WatchEvent]]:
        """Counted when the stream opens (or is refused); what the stream then does is the
        informer's to handle."""
        opened = False
        try:
            async with self.api.watch(
                res,
                namespace,
                resource_version=resource_version,
                label_selector=label_selector,
                field_selector=field_selector,
                timeout_seconds=timeout_seconds,
                bookmarks=bookmarks,
            ) as events:
                opened = True
                self._succeeded(Permission.of("watch", res, namespace), 200)
                yield events
        except KubeError as e:
            if not opened:
                self._failed(Permission.of("watch", res, namespace), e)
            raise

    # --- outcomes -----------------------------------------------------------------------
    async def _call(self, verb: str, res: Resource, namespace: str | None, call: Awaitable[T]) -> T:
        permission = Permission.of(verb, res, namespace)
        try:
            result = await call
        except KubeError as e:
            self._failed(permission, e)
            raise
        self._succeeded(permission, 201 if verb == "create" else 200)
        return result

    def _count(self, permission: Permission, code: int) -> None:
        self.metrics.api_requests.labels(permission.verb, permission.resource, str(code)).inc()

    def _succeeded(self, permission: Permission, code: int) -> None:
        self._count(permission, code)
        if self.refused.pop(permission, None) is not None:
            log.info("%s: %s allowed again", self.who, permission)

    def _failed(self, permission: Permission, error: KubeError) -> None:
        self._count(permission, error.status)
        if not isinstance(error, Forbidden):
            return
        if permission not in self.refused:
            log.error(
                "%s: %s %s forbidden (403): the node agent's RBAC lacks %s: %s",
                self.who, permission.verb, permission.resource, permission, error,
            )  # fmt: skip
        self.refused[permission] = str(error)
