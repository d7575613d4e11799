"""The write verbs — create, update, patch, server-side apply — and what they share.

Every write ends in the same pipeline: the body checked against the resource type, the
object decodable, server-owned metadata kept or stamped, the kind's ``prepare_*`` and
``validate_*`` hooks, then one store write (or none, for a dry run or a no-op). Patch and
apply only differ in how they build the new object, so they sit beside ``_update`` here.
"""

from __future__ import annotations

import builtins
from typing import Any

from simcluster.apiserver import apply
from simcluster.apiserver.core_base import CoreBase, Obj, copy_object
from simcluster.apiserver.meta import rfc3339
from simcluster.apiserver.patch import apply_patch
from simcluster.apiserver.resources import ResourceType
from simcluster.apiserver.strategy import Strategy, invalid, required
from simcluster.apiserver.validation.decode import check_decodable
from simcluster.errors import STALE, AlreadyExists, BadRequest, Conflict

__all__ = ["WriteVerbs"]


class WriteVerbs(CoreBase):
    """create, update, patch and apply, with optimistic concurrency on resourceVersion."""

    def _admit_new(self, rt: ResourceType, strategy: Strategy, namespace: str, meta: Obj) -> None:
        """Name a new object (from ``generateName``) and refuse it for its metadata alone,
        in a fixed order, as the first failure is what the client sees: no name, a name the
        kind's rule refuses, no such (or a terminating) namespace, a taken name, a
        resourceVersion."""
        if not meta.get("name"):
            if not meta.get("generateName"):
                raise required(rt, "", "metadata.name", "name or generateName is required")
            meta["name"] = self.ids.generate_name(meta["generateName"])
        strategy.validate_name(rt, meta["name"])
        self._require_namespace(rt, namespace, creating=True)
        if self.store.get(rt.key, meta.get("namespace", ""), meta["name"]) is not None:
            raise AlreadyExists.for_object(rt.plural, rt.group, meta["name"])
        if meta.get("resourceVersion"):
            raise invalid(rt, meta["name"], "metadata.resourceVersion", "must be empty on create")

    def _stamp_new(self, rt: ResourceType, obj: Obj) -> None:
        """Server-owned metadata of a new object; its status is the server's (or the
        strategy's) to set, never the client's."""
        meta = obj["metadata"]
        for k in ("deletionTimestamp", "deletionGracePeriodSeconds", "resourceVersion"):
            meta.pop(k, None)
        meta["uid"] = self.ids.uid()
        meta["creationTimestamp"] = rfc3339()
        if "spec" in obj and rt.has_status:
            meta["generation"] = 1
        if rt.has_status:
            obj.pop("status", None)

    # --- verbs -------------------------------------------------------------------------
    def create(
        self,
        rt: ResourceType,
        namespace: str,
        body: Any,
        *,
        dry_run: bool = False,
        managed: builtins.list[Obj] | None = None,
    ) -> Obj:
        obj = self._check_body(rt, namespace, body)
        if managed:
            obj["metadata"]["managedFields"] = managed
        check_decodable(rt.key, rt.kind, rt.version, obj)
        strategy = self.strategies.for_key(rt.key)
        self._admit_new(rt, strategy, namespace, obj["metadata"])
        self._stamp_new(rt, obj)
        strategy.prepare_create(rt, obj)
        strategy.validate_create(rt, obj)
        if dry_run:
            return obj
        self.write(rt, obj, None)
        strategy.after_create(rt, obj)
        return obj

    def update(
        self,
        rt: ResourceType,
        namespace: str,
        name: str,
        body: Any,
        *,
        subresource: str = "",
        dry_run: bool = False,
        manager: str = "",
    ) -> Obj:
        new = self._check_body(rt, namespace, body)
        if new["metadata"].get("name") != name:
            raise BadRequest(
                f"the name of the object ({new['metadata'].get('name')}) does not match the name on the URL ({name})"  # noqa: E501
            )
        old = self.lookup(rt, namespace, name)
        want_rv = new["metadata"].get("resourceVersion")
        if want_rv and want_rv != old["metadata"]["resourceVersion"]:
            raise Conflict.for_object(rt.plural, rt.group, name, STALE)
        return self._update(rt, old, new, subresource=subresource, dry_run=dry_run, manager=manager)

    def _update(
        self,
        rt: ResourceType,
        old: Obj,
        new: Obj,
        *,
        subresource: str,
        dry_run: bool,
        manager: str = "",
        managed: builtins.list[Obj] | None = None,
    ) -> Obj:
        if not subresource:  # a status write keeps the stored spec, decoded long ago
            check_decodable(rt.key, rt.kind, rt.version, new)
        merged = self._merge_update(rt, old, new, subresource)
        if not subresource:
            apply.record_update(rt.has_status, rt.api_version, old, merged, manager, managed)
        strategy = self.strategies.for_key(rt.key)
        strategy.prepare_update(rt, merged, old, subresource)
        strategy.validate_update(rt, merged, old, subresource)
        meta = merged["metadata"]
        if (
            meta.get("deletionTimestamp")
            and not meta.get("finalizers")
            and not meta.get("deletionGracePeriodSeconds")
        ):
            return old if dry_run else self._remove(rt, merged)
        if _same(merged, old):
            return old
        if dry_run:
            return merged
        return self.write(rt, merged, old)

    def _merge_update(self, rt: ResourceType, old: Obj, new: Obj, subresource: str) -> Obj:
        if subresource == "status":
            merged = copy_object(old)
            if "status" in new:
                merged["status"] = new["status"]
            else:
                merged.pop("status", None)
            return merged
        merged = new
        meta, old_meta = merged["metadata"], old["metadata"]
        for k in (
            "uid",
            "creationTimestamp",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "generation",
            "managedFields",  # the server's record (``_own``), not the client's
        ):
            if k in old_meta:
                meta[k] = old_meta[k]
            else:
                meta.pop(k, None)
        meta["resourceVersion"] = old_meta["resourceVersion"]
        meta.pop("generateName", None) if "generateName" not in old_meta else None
        if rt.has_status:
            if "status" in old:
                merged["status"] = old["status"]
            else:
                merged.pop("status", None)
        if "generation" in meta and _spec(merged) != _spec(old):
            meta["generation"] = int(meta["generation"]) + 1
        return merged

    def patch(
        self,
        rt: ResourceType,
        namespace: str,
        name: str,
        content_type: str,
        body: Any,
        *,
        subresource: str = "",
        dry_run: bool = False,
        manager: str = "",
    ) -> Obj:
        old = self.lookup(rt, namespace, name)
        patched = apply_patch(content_type, copy_object(old), body, strategic_ok=rt.builtin)
        if not isinstance(patched, dict):
            raise BadRequest("the patched object is not a JSON object")
        want_rv = (patched.get("metadata") or {}).get("resourceVersion")
        if want_rv and want_rv != old["metadata"]["resourceVersion"]:
            raise Conflict.for_object(rt.plural, rt.group, name, STALE)
        patched.setdefault("metadata", {})["name"] = name
        new = self._check_body(rt, namespace, patched)
        return self._update(rt, old, new, subresource=subresource, dry_run=dry_run, manager=manager)

    def apply(
        self,
        rt: ResourceType,
        namespace: str,
        name: str,
        body: Any,
        *,
        manager: str,
        force: bool = False,
        dry_run: bool = False,
    ) -> tuple[bool, Obj]:
        """Server-side apply (``apply``): create with the manager owning what it applied,
        or merge into the live object after the conflict check. Returns (created?, object)."""
        config, fields = apply.prepare(rt, name, body, manager)
        live = self.store.get(rt.key, namespace if rt.namespaced else "", name)
        if live is None:
            owned = apply.for_create(manager, fields, rt.api_version)
            return True, self.create(rt, namespace, config, dry_run=dry_run, managed=owned)
        merged, managed = apply.merge_into(rt, live, config, fields, manager, force=force)
        new = self._check_body(rt, namespace, merged)
        return False, self._update(rt, live, new, subresource="", dry_run=dry_run, managed=managed)


def _spec(o: Obj) -> Obj:
    return {k: v for k, v in o.items() if k not in ("metadata", "status")}


def _same(a: Obj, b: Obj) -> bool:
    return a == b
