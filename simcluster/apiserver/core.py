"""The verbs of the API server — create, get, list, update, patch, apply, delete,
deletecollection, watch — with the real server's semantics, independent of HTTP.

Both the HTTP front end and in-process clients (the simulated kubelets) call these methods, so
every client sees the same uid/generateName/resourceVersion/optimistic-concurrency/graceful
deletion behaviour. Kind-specific rules (pod defaults, binding, quotas, namespaces, CRDs) live
in one strategy object per kind (``kinds``, chosen by the table in ``strategies``), called
at the hooks ``strategy.Strategy`` defines; this module holds what is common to every kind
and never names one. Strategies and the garbage collector write back through the narrow
``writer.Writer`` this class implements, so none of them imports this module. The rules of
one concern each live beside it: list/watch options and continue tokens (``listoptions``),
DeleteOptions (``deleteoptions``), server-side apply's field ownership (``apply``).
"""

from __future__ import annotations

import builtins
import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import msgspec

from simcluster.apiserver import apply
from simcluster.apiserver.auth import Authenticator
from simcluster.apiserver.deleteoptions import check_delete_options, requested_grace
from simcluster.apiserver.gc import GarbageCollector, deletion_finalizers
from simcluster.apiserver.listoptions import (
    EXACT,
    INCONSISTENT_CONTINUE,
    decode_continue,
    encode_continue,
    too_large,
)
from simcluster.apiserver.meta import IdSource, now, rfc3339
from simcluster.apiserver.patch import apply_patch
from simcluster.apiserver.resources import Registry, ResourceType
from simcluster.apiserver.selectors import FieldSelector, LabelSelector
from simcluster.apiserver.store import Event, Renderer, Store, Watcher, default_render
from simcluster.apiserver.strategies import STRATEGIES, Strategies, StrategyFactory
from simcluster.apiserver.strategy import Strategy, StrategyContext, invalid, required
from simcluster.apiserver.validation.decode import check_decodable
from simcluster.errors import (
    STALE,
    AlreadyExists,
    BadRequest,
    Conflict,
    Expired,
    Forbidden,
    MethodNotAllowed,
    NotFound,
)

__all__ = ["ApiCore", "ListOptions"]

Obj = dict[str, Any]


@dataclass(frozen=True, slots=True)
class ListOptions:
    label_selector: str | None = None
    field_selector: str | None = None
    limit: int = 0
    continue_token: str | None = None
    resource_version: str | None = None
    resource_version_match: str | None = None


#: What a listed item leaves out.
_TYPE_META = frozenset({"kind", "apiVersion"})


def _copy(obj: Obj) -> Obj:
    return msgspec.json.decode(msgspec.json.encode(obj))


class ApiCore:
    """Kubernetes object semantics over a ``Store``.

    ``strategies`` maps store keys to strategy factories (default: every built-in kind with
    rules); the garbage collector listens to the store, so it sees every put and removal."""

    def __init__(
        self,
        registry: Registry,
        store: Store,
        *,
        auth: Authenticator | None = None,
        strategies: Mapping[str, StrategyFactory] = STRATEGIES,
    ) -> None:
        self.registry = registry
        self.store = store
        self.ids = IdSource()
        self.auth = auth or Authenticator()
        self.gc = GarbageCollector(self, registry)
        store.add_listener(self.gc.on_event)
        ctx = StrategyContext(writer=self, objects=store, registry=registry, auth=self.auth)
        self.strategies = Strategies(ctx, strategies)

    # --- helpers -----------------------------------------------------------------------
    def _require_namespace(self, rt: ResourceType, namespace: str, creating: bool) -> None:
        if not rt.namespaced:
            return
        ns = self.store.get("/namespaces", "", namespace)
        if ns is None:
            raise NotFound.for_object("namespaces", "", namespace)
        if creating and ns["metadata"].get("deletionTimestamp"):
            err = Forbidden.for_object(
                rt.plural,
                rt.group,
                "",
                f"unable to create new content in namespace {namespace} because it is being terminated",  # noqa: E501
            )
            assert err.details is not None  # the NamespaceLifecycle plugin's cause
            err.details["causes"] = [
                {
                    "reason": "NamespaceTerminating",
                    "message": f"namespace {namespace} is being terminated",
                    "field": "metadata.namespace",
                }
            ]
            raise err

    def _check_body(self, rt: ResourceType, namespace: str, body: Any) -> Obj:
        if not isinstance(body, dict):
            raise BadRequest("the body of the request must be a JSON object")
        api_version, kind = body.get("apiVersion"), body.get("kind")
        if api_version and api_version != rt.api_version:
            raise BadRequest(
                f"the API version in the data ({api_version}) does not match the expected API version ({rt.api_version})"  # noqa: E501
            )
        if kind and kind != rt.kind:
            raise BadRequest(
                f"the kind in the data ({kind}) does not match the expected kind ({rt.kind})"
            )
        meta = body.setdefault("metadata", {})
        if not isinstance(meta, dict):
            raise BadRequest("metadata must be an object")
        if rt.namespaced:
            if meta.get("namespace") and meta["namespace"] != namespace:
                raise BadRequest(
                    "the namespace of the provided object does not match the namespace sent on the request"  # noqa: E501
                )
            meta["namespace"] = namespace
        else:
            meta.pop("namespace", None)
        body["apiVersion"], body["kind"] = rt.api_version, rt.kind
        meta.pop("managedFields", None)
        meta.pop("selfLink", None)
        return body

    def lookup(self, rt: ResourceType, namespace: str, name: str) -> Obj:
        obj = self.store.get(rt.key, namespace if rt.namespaced else "", name)
        if obj is None:
            raise NotFound.for_object(rt.plural, rt.group, name)
        return obj

    def write(self, rt: ResourceType, obj: Obj, old: Obj | None) -> Obj:
        """Store ``obj`` (replacing ``old``) under the next resourceVersion, as is: the
        caller has applied the verb's rules (``Writer.write``)."""
        obj["metadata"]["resourceVersion"] = str(self.store.next_rv())
        self.store.put(rt.key, obj, old)
        return obj

    def _remove(self, rt: ResourceType, obj: Obj) -> Obj:
        event = self.store.remove(rt.key, obj)
        self.strategies.for_key(rt.key).after_remove(rt, event.obj)
        return event.obj

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

    def get(
        self, rt: ResourceType, namespace: str, name: str, resource_version: str | None = None
    ) -> Obj:
        """The object as it is now, which is not older than any ``resource_version`` the
        store has reached (a newer one is upstream's too-large answer)."""
        self.reached(resource_version)
        return self.lookup(rt, namespace, name)

    def reached(self, resource_version: str | None) -> int | None:
        """A read's resourceVersion as a revision (None for unset or "0": any), refused
        when the store has not reached it yet."""
        if resource_version in (None, "", "0"):
            return None
        try:
            asked = int(resource_version)
        except ValueError:
            raise BadRequest(f"invalid resource version {resource_version!r}")
        if asked > self.store.rv:
            raise too_large(asked, self.store.rv)
        return asked

    def list(self, rt: ResourceType, namespace: str | None, opts: ListOptions) -> Obj:
        """The list at one revision: the latest, or the one a continue token or an Exact
        resourceVersion names (every page of a paginated list shows the first page's
        revision, as etcd's MVCC reads do upstream)."""
        labels = LabelSelector.parse(opts.label_selector)
        fields = FieldSelector.parse(opts.field_selector, rt.field_selectors, rt.kind)
        at, start = self._list_revision(opts)
        try:
            source = (
                self.store.iter(rt.key, namespace)
                if at is None
                else self.store.iter_at(rt.key, namespace, at)
            )
        except Expired:
            if not opts.continue_token:
                raise
            raise Expired(INCONSISTENT_CONTINUE, continue_token=encode_continue(-1, start))
        items = [
            o for o in source if labels.matches(o["metadata"].get("labels")) and fields.matches(o)
        ]
        items.sort(key=_sort_key)
        if start:
            items = [o for o in items if _sort_key(o) > start]
        list_rv = self.store.rv if at is None else at
        meta: Obj = {"resourceVersion": str(list_rv)}
        if opts.limit and len(items) > opts.limit:
            rest = len(items) - opts.limit
            items = items[: opts.limit]
            meta["continue"] = encode_continue(list_rv, _sort_key(items[-1]))
            meta["remainingItemCount"] = rest
        return {
            "kind": f"{rt.kind}List",
            "apiVersion": rt.api_version,
            "metadata": meta,
            # As upstream: the items carry no kind or apiVersion (kubernetes/kubernetes#3030),
            # so a client that reads them from a listed object fails here as it would there.
            "items": [{k: v for k, v in o.items() if k not in _TYPE_META} for o in items],
        }

    def _list_revision(self, opts: ListOptions) -> tuple[int | None, str]:
        """(revision to list at — None for the latest —, key to start after). A continue
        token carries both (-1: the latest, upstream's token after a 410); a resourceVersion
        is a revision for ``Exact``, and for a paginated list without a match (upstream's
        legacy rule), else only a lower bound the latest state meets."""
        if opts.continue_token:
            if opts.resource_version not in (None, "", "0"):
                raise BadRequest("specifying resource version is not allowed when using continue")
            rv, start = decode_continue(opts.continue_token)
            return (None if rv == -1 else rv), start
        asked = self.reached(opts.resource_version)
        if asked is None:
            return None, ""
        match = opts.resource_version_match
        exact = match == EXACT or (not match and opts.limit > 0)
        return (asked if exact else None), ""

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
            merged = _copy(old)
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
        patched = apply_patch(content_type, _copy(old), body, strategic_ok=rt.builtin)
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

    def delete(self, rt: ResourceType, namespace: str, name: str, options: Obj | None) -> Obj:
        options = options or {}
        obj = self.lookup(rt, namespace, name)
        pre = options.get("preconditions") or {}
        meta = obj["metadata"]
        if pre.get("uid") and pre["uid"] != meta["uid"]:
            raise Conflict.for_object(
                rt.plural,
                rt.group,
                name,
                f"Precondition failed: UID in precondition: {pre['uid']}, UID in object meta: {meta['uid']}",  # noqa: E501
            )
        if pre.get("resourceVersion") and pre["resourceVersion"] != meta["resourceVersion"]:
            raise Conflict.for_object(
                rt.plural,
                rt.group,
                name,
                f"Precondition failed: ResourceVersion in precondition: {pre['resourceVersion']}, "
                f"ResourceVersion in object meta: {meta['resourceVersion']}",
            )
        check_delete_options(options)
        if options.get("dryRun"):
            return obj
        strategy = self.strategies.for_key(rt.key)
        grace = strategy.grace_period(rt, obj, requested_grace(options))
        finalizers = deletion_finalizers(list(meta.get("finalizers") or []), options)
        if grace == 0 and not finalizers:
            if strategy.graceful_delete and not meta.get("deletionTimestamp"):
                # upstream's graceful path at grace 0: the object is written with its
                # deletionTimestamp (MODIFIED), then deleted (DELETED), and that is answered
                obj = self._mark_deleting(rt, obj, 0, finalizers)
            return self._remove(rt, obj)
        return self._mark_deleting(rt, obj, grace, finalizers)

    def _mark_deleting(
        self, rt: ResourceType, obj: Obj, grace: int, finalizers: builtins.list[str]
    ) -> Obj:
        """Write ``obj`` as terminating: its deletionTimestamp (generation bumped when the
        deletion starts, as upstream's ``BeforeDelete``/``markAsDeleting``), a shorter grace
        period than it had, and the garbage collector's finalizers the DELETE asked for."""
        meta = obj["metadata"]
        shorter = not meta.get("deletionTimestamp") or (
            int(meta.get("deletionGracePeriodSeconds") or 0) > grace
        )
        if not shorter and finalizers == (meta.get("finalizers") or []):
            return obj  # already terminating with a shorter (or equal) grace period
        new = _copy(obj)
        if finalizers:
            new["metadata"]["finalizers"] = finalizers
        else:
            new["metadata"].pop("finalizers", None)
        if shorter:
            new["metadata"]["deletionTimestamp"] = rfc3339(now() + dt.timedelta(seconds=grace))
            new["metadata"]["deletionGracePeriodSeconds"] = grace
            if "generation" in new["metadata"] and not meta.get("deletionTimestamp"):
                new["metadata"]["generation"] = int(new["metadata"]["generation"]) + 1
            self.strategies.for_key(rt.key).prepare_delete(rt, new)
        return self.write(rt, new, obj)

    def create_subresource(
        self, rt: ResourceType, subresource: str, namespace: str, name: str, body: Any
    ) -> Obj:
        """POST to a subresource (pods/binding, serviceaccounts/token): the kind's answer."""
        strategy = self.strategies.for_key(rt.key)
        return strategy.create_subresource(rt, subresource, namespace, name, body)

    def delete_collection(
        self, rt: ResourceType, namespace: str | None, opts: ListOptions, options: Obj | None
    ) -> Obj:
        listed = self.list(rt, namespace, ListOptions(opts.label_selector, opts.field_selector))
        out = []
        for item in listed["items"]:
            m = item["metadata"]
            try:
                out.append(self.delete(rt, m.get("namespace", ""), m["name"], options))
            except NotFound:
                continue
        listed["items"] = out
        return listed

    def watch(
        self,
        rt: ResourceType,
        namespace: str | None,
        opts: ListOptions,
        *,
        bookmarks: bool,
        render: Renderer = default_render,
        send_initial_events: bool = False,
    ) -> Watcher:
        """A watcher with its backlog: synthetic ADDED events for the current state (when
        resourceVersion is unset/"0", or with sendInitialEvents — then closed by a bookmark
        annotated ``k8s.io/initial-events-end``, as the watch-list protocol wants), or the
        history after the given resourceVersion (410 Expired if it has been compacted)."""
        labels = LabelSelector.parse(opts.label_selector)
        fields = FieldSelector.parse(opts.field_selector, rt.field_selectors, rt.kind)
        w = Watcher(rt.key, namespace, labels, fields, bookmarks, render)
        rv = opts.resource_version
        if send_initial_events or rv in (None, "", "0"):
            for obj in sorted(self.store.iter(rt.key, namespace), key=_sort_key):
                if w.matches(obj):
                    meta_rv = int(obj["metadata"]["resourceVersion"])
                    w.push(render("ADDED", Event(meta_rv, "ADDED", rt.key, "", obj, None)))
            if send_initial_events and bookmarks:  # etcd3's isInitialEventsEndBookmarkRequired
                w.push(self.bookmark(rt, w, initial_events_end=True))
            self.store.subscribe(w, None)
            return w
        try:
            since = int(rv)
        except ValueError:
            raise BadRequest(f"invalid resource version {rv!r}")
        self.store.subscribe(w, since)
        return w

    def bookmark(self, rt: ResourceType, w: Watcher, initial_events_end: bool = False) -> bytes:
        """A BOOKMARK line at the latest revision."""
        meta: Obj = {"resourceVersion": str(self.store.rv)}
        if initial_events_end:
            meta["annotations"] = {"k8s.io/initial-events-end": "true"}
        obj = {"kind": rt.kind, "apiVersion": rt.api_version, "metadata": meta}
        return b'{"type":"BOOKMARK","object":' + msgspec.json.encode(obj) + b"}\n"

    def require_verb(self, rt: ResourceType, verb: str) -> None:
        if verb not in rt.verbs:
            raise MethodNotAllowed(
                "the server does not allow this method on the requested resource"
            )


def _sort_key(o: Obj) -> str:
    m = o["metadata"]
    return f"{m.get('namespace', '')}/{m['name']}"


def _spec(o: Obj) -> Obj:
    return {k: v for k, v in o.items() if k not in ("metadata", "status")}


def _same(a: Obj, b: Obj) -> bool:
    return a == b
