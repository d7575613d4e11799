"""The namespace strategy: the ``kubernetes`` finalizer, a default service account, and
termination that empties the namespace before removing it.

Upstream's namespace controller deletes a terminating namespace's content and then the
namespace; here that happens on the event loop's next turn after the delete request (so the
request is answered with the namespace in phase Terminating, as a real server answers).
"""

from __future__ import annotations

from typing import Any

from simcluster.apiserver.deferred import call_soon
from simcluster.apiserver.meta import rfc3339, validate_name
from simcluster.apiserver.resources import ResourceType
from simcluster.apiserver.strategy import Strategy, StrategyContext

__all__ = ["NamespaceStrategy"]

Obj = dict[str, Any]
NAMESPACES = "/namespaces"


class NamespaceStrategy(Strategy):
    def __init__(self, ctx: StrategyContext) -> None:
        self.writer = ctx.writer
        self.objects = ctx.objects
        self.registry = ctx.registry

    def validate_name(self, rt: ResourceType, name: str) -> None:
        validate_name(rt.kind, rt.group, name, dns_label=True)  # an RFC 1123 label

    def prepare_create(self, rt: ResourceType, obj: Obj) -> None:
        meta = obj["metadata"]
        obj["spec"] = {"finalizers": ["kubernetes"]}
        obj["status"] = {"phase": "Active"}
        meta.setdefault("labels", {})["kubernetes.io/metadata.name"] = meta["name"]

    def after_create(self, rt: ResourceType, obj: Obj) -> None:
        """Every namespace gets a ``default`` service account (upstream's SA controller)."""
        sa = self.registry.get("", "v1", "serviceaccounts")
        assert sa is not None
        self.writer.create(sa, obj["metadata"]["name"], {"metadata": {"name": "default"}})

    def prepare_update(self, rt: ResourceType, new: Obj, old: Obj, subresource: str) -> None:
        if not subresource:
            new["spec"], new["status"] = old.get("spec"), old.get("status")

    def grace_period(self, rt: ResourceType, obj: Obj, requested: Any) -> int:
        return 1  # never removed at once: the namespace controller empties it first

    def prepare_delete(self, rt: ResourceType, obj: Obj) -> None:
        obj["status"] = {"phase": "Terminating"}
        obj["metadata"]["deletionGracePeriodSeconds"] = 0
        obj["metadata"]["deletionTimestamp"] = rfc3339()

    def after_mark_deleting(self, rt: ResourceType, obj: Obj) -> None:
        name = obj["metadata"]["name"]
        call_soon(lambda: self.finalize(name))

    def finalize(self, name: str) -> None:
        """Purge every namespaced object in ``name``, then the namespace itself unless
        other finalizers (``metadata.finalizers``) hold it: it stays Terminating, refusing
        new content, until they are removed (the update that removes the last one deletes
        it)."""
        for key in self.objects.keys():  # noqa: SIM118 (Objects is not a mapping)
            rt = self.registry.for_key(key)
            if rt is None or not rt.namespaced:
                continue
            for obj in list(self.objects.iter(key, name)):
                self.objects.remove(key, obj)
        ns = self.objects.get(NAMESPACES, "", name)
        if ns is not None and not ns["metadata"].get("finalizers"):
            self.objects.remove(NAMESPACES, ns)
