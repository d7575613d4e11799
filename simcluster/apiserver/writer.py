"""The narrow interfaces that kind strategies and the garbage collector are handed.

Strategies and the collector need to write objects (a namespace creates its default service
account, a pod's creation refreshes its namespace's quotas, the collector deletes or orphans
dependents) and to read the store. Handing them the whole ``ApiCore`` made ``core`` import
``strategies`` and ``strategies`` import ``core``; typing them against these Protocols
instead lets ``core`` implement them structurally and be the only module that imports the
rest, and keeps each collaborator honest about what it may do.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Protocol

from simcluster.apiserver.resources import ResourceType

__all__ = ["Objects", "Writer"]

Obj = dict[str, Any]


class Writer(Protocol):
    """Writes through the API semantics: the verbs, plus ``write`` for a prepared object.

    ``create``/``patch``/``delete`` run the full verb (validation, strategy hooks, graceful
    deletion); ``write`` stores an object its caller already built from ``old`` (a binding,
    a recomputed quota status) under a fresh resourceVersion, as the real server's
    subresource and status updates do, without re-running create or update rules."""

    def create(self, rt: ResourceType, namespace: str, body: Any) -> Obj: ...

    def lookup(self, rt: ResourceType, namespace: str, name: str) -> Obj: ...

    def write(self, rt: ResourceType, obj: Obj, old: Obj | None) -> Obj: ...

    def patch(
        self, rt: ResourceType, namespace: str, name: str, content_type: str, body: Any
    ) -> Obj: ...

    def delete(self, rt: ResourceType, namespace: str, name: str, options: Obj | None) -> Obj: ...


class Objects(Protocol):
    """The store as a strategy reads it, plus ``remove`` for purges.

    A purge (a terminating namespace's content, a deleted CRD's custom resources) removes
    objects without their kinds' delete rules — no grace period, no finalizers — as the
    namespace controller and the CRD finalizer do upstream; store events still go out, so
    watchers and the garbage collector see every removal."""

    def get(self, key: str, namespace: str, name: str) -> Obj | None: ...

    def iter(self, key: str, namespace: str | None = None) -> Iterator[Obj]: ...

    def keys(self) -> list[str]: ...

    def remove(self, key: str, obj: Obj) -> object: ...
