"""The read verbs — get, list, watch — and the revision a read is answered at.

Reads never change the store; what they share is how a resourceVersion, a continue token and
``resourceVersionMatch`` choose the revision (``reached``, ``_list_revision``), and the order
and selectors every listing and watch applies. Kept apart from the writes so the rules of
consistent pagination and watch backlogs read in one place.
"""

from __future__ import annotations

import msgspec

from simcluster.apiserver.core_base import CoreBase, Obj, sort_key
from simcluster.apiserver.listoptions import (
    EXACT,
    INCONSISTENT_CONTINUE,
    ListOptions,
    decode_continue,
    encode_continue,
    too_large,
)
from simcluster.apiserver.resources import ResourceType
from simcluster.apiserver.selectors import FieldSelector, LabelSelector
from simcluster.apiserver.store import Event, Renderer, Watcher, default_render
from simcluster.errors import BadRequest, Expired

__all__ = ["ReadVerbs"]

#: What a listed item leaves out.
_TYPE_META = frozenset({"kind", "apiVersion"})


class ReadVerbs(CoreBase):
    """get, list and watch over the store, at the revision the request names."""

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
        fields = FieldSelector.parse(opts.field_selector, rt.field_selectors)
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
        items.sort(key=sort_key)
        if start:
            items = [o for o in items if sort_key(o) > start]
        list_rv = self.store.rv if at is None else at
        meta: Obj = {"resourceVersion": str(list_rv)}
        if opts.limit and len(items) > opts.limit:
            rest = len(items) - opts.limit
            items = items[: opts.limit]
            meta["continue"] = encode_continue(list_rv, sort_key(items[-1]))
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
        fields = FieldSelector.parse(opts.field_selector, rt.field_selectors)
        w = Watcher(rt.key, namespace, labels, fields, bookmarks, render)
        rv = opts.resource_version
        if send_initial_events or rv in (None, "", "0"):
            for obj in sorted(self.store.iter(rt.key, namespace), key=sort_key):
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
