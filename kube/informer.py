"""Informers: list, then watch from the list's resourceVersion; an indexed cache; handlers.

Why our own (and not kr8s's watch): kr8s resumes a broken watch with the same stale
resourceVersion forever after a 410, has no bookmarks and no idle detection, and decodes with
httpx + json. This one follows client-go's reflector:

1. **List** (paginated) and replace the cache, telling handlers what was added, changed or
   deleted since the last list. ``synced`` is set after the first list. A continue token that
   expired mid-list (410: the list took longer than the server keeps history) falls back to
   one unpaginated list, as client-go's pager does (``FullListIfExpired``): starting the pages
   over took as long again and expired again, so at 25,000 pods on a busy simcluster (list
   slower than its 75 s window) the controller relisted forever and never bound a pod.
2. **Watch** from the list's resourceVersion with ``allowWatchBookmarks`` and
   ``timeoutSeconds``. Every event and bookmark advances the resume point.
3. The stream ends (server timeout) or breaks (connection reset, 5xx): **resume** the watch
   from the last resourceVersion seen, no relist.
4. No bytes at all for ``Timeouts.watch_idle`` (not even a bookmark): the stream is treated as
   dead (a silently dropped connection) and resumed.
5. **410 Gone** (history compacted, or the server says so): relist, then watch again.

Errors back off exponentially with full jitter, never sooner than a 429's Retry-After
(:mod:`sandman.base.backoff`); a stuck API server never turns into a hot loop.
A **403** is retried the same way (an operator may restore the rule) but is no transient:
the cache stops following the cluster while ``synced`` stays set, so it is logged once as
an error and held in ``forbidden`` until a list or watch succeeds again; the components'
``/readyz`` report it.
Handlers are plain functions called inline on the event loop: keep them short (enqueue work,
update a model) and never block.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Protocol

from kube.cache import Cache, IndexFunc, Obj, object_key
from kube.errors import Forbidden, Gone, KubeError
from kube.resources import Resource
from kube.watch import ApiClient
from sandman.base.backoff import Backoff
from sandman.base.settings import setting

__all__ = ["EventHandler", "Handlers", "Informer", "InformerSettings", "InformerStats"]

log = logging.getLogger(__name__)


class EventHandler(Protocol):
    def on_add(self, obj: Obj) -> None: ...
    def on_update(self, old: Obj, new: Obj) -> None: ...
    def on_delete(self, obj: Obj) -> None: ...


@dataclass(frozen=True, slots=True)
class Handlers:
    """An :class:`EventHandler` from up to three functions."""

    add: Callable[[Obj], None] | None = None
    update: Callable[[Obj, Obj], None] | None = None
    delete: Callable[[Obj], None] | None = None

    def on_add(self, obj: Obj) -> None:
        if self.add is not None:
            self.add(obj)

    def on_update(self, old: Obj, new: Obj) -> None:
        if self.update is not None:
            self.update(old, new)

    def on_delete(self, obj: Obj) -> None:
        if self.delete is not None:
            self.delete(obj)


@dataclass(frozen=True, slots=True)
class InformerSettings:
    watch_timeout_s: int = setting(
        300, help="timeoutSeconds of each watch request (client-go picks 5-10 minutes at random)"
    )
    page_size: int = setting(500, help="items per list page (0: no pagination)")
    backoff_base_s: float = setting(
        0.4,
        help="after n consecutive failed lists (or watches) wait up to "
        "backoff_base_s * 2**(n-1), capped at backoff_cap_s, full jitter; a 429's Retry-After "
        "is the floor",
    )
    backoff_cap_s: float = setting(30.0, help="the longest wait before a relist or rewatch")

    def __post_init__(self) -> None:
        self.backoff  # noqa: B018 - validates the backoff values now, not at the first failure

    @property
    def backoff(self) -> Backoff:
        """The relist and rewatch delays (the one helper every Sandman retry loop uses).
        A Retry-After longer than ``backoff_cap_s`` is clamped to it."""
        return Backoff(
            initial_s=self.backoff_base_s,
            cap_s=self.backoff_cap_s,
            jitter="full",
            max_retry_after_s=self.backoff_cap_s,
        )


@dataclass
class InformerStats:
    """Counters for metrics and tests."""

    lists: int = 0
    watches: int = 0
    events: int = 0
    bookmarks: int = 0
    relists_on_gone: int = 0
    full_lists_on_expired: int = 0
    errors: int = 0


@dataclass(frozen=True, slots=True)
class _Selection:
    namespace: str | None = None
    label_selector: str | None = None
    field_selector: str | None = None


class Informer:
    """One resource type (optionally one namespace and selectors) kept in a :class:`Cache`."""

    def __init__(
        self,
        client: ApiClient,
        resource: Resource,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        indexers: Mapping[str, IndexFunc] | None = None,
        settings: InformerSettings | None = None,
        name: str = "",
        keep: Callable[[Obj], bool] | None = None,
    ) -> None:
        """``keep``: a client-side filter on top of the selectors. An object it rejects is
        not cached, and leaves the cache (handlers see a delete) when an update makes it
        fail, as the server does for selectors."""
        self.client = client
        self.resource = resource
        self.selection = _Selection(namespace, label_selector, field_selector)
        self.settings = settings or InformerSettings()
        self.cache = Cache(indexers)
        self.synced = asyncio.Event()
        #: The last list's or watch's Forbidden message while they are refused, else None.
        self.forbidden: str | None = None
        self.stats = InformerStats()
        self.resource_version = ""
        self.name = name or resource.plural
        self.keep = keep
        self._on_add: list[Callable[[Obj], None]] = []
        self._on_update: list[Callable[[Obj, Obj], None]] = []
        self._on_delete: list[Callable[[Obj], None]] = []
        self._rng = random.Random()

    def add_handler(self, handler: EventHandler) -> None:
        """Register ``handler``; it is first told about every object already cached."""
        if isinstance(handler, Handlers):  # only the functions it has, unwrapped
            add, update, delete = handler.add, handler.update, handler.delete
        else:
            add, update, delete = handler.on_add, handler.on_update, handler.on_delete
        if add is not None:
            self._on_add.append(add)
        if update is not None:
            self._on_update.append(update)
        if delete is not None:
            self._on_delete.append(delete)
        for obj in self.cache:
            if add is not None:
                try:
                    add(obj)
                except Exception:
                    log.exception("%s: event handler %r failed", self.name, add)

    async def wait_synced(self) -> None:
        await self.synced.wait()

    async def run(self) -> None:
        """List and watch until cancelled."""
        failures = 0
        while True:
            try:
                await self._list()
                failures = 0
                await self._watch_until_gone()
                self.stats.relists_on_gone += 1
                log.info(
                    "%s: resourceVersion %s expired, relisting", self.name, self.resource_version
                )
            except KubeError as e:
                self.stats.errors += 1
                failures += 1
                if not self._refused(e):
                    log.warning("%s: list failed (%s), retrying", self.name, e)
                await asyncio.sleep(self._backoff(failures, e))

    # --- list ---------------------------------------------------------------------------
    async def _list(self) -> None:
        sel = self.selection
        items: list[Obj] = []
        token: str | None = None
        rv = ""
        while True:
            try:
                page = await self.client.list(
                    self.resource,
                    sel.namespace,
                    label_selector=sel.label_selector,
                    field_selector=sel.field_selector,
                    limit=self.settings.page_size,
                    continue_token=token,
                )
            except Gone:
                if token is None:
                    raise
                self.stats.full_lists_on_expired += 1
                log.info("%s: continue token expired mid-list, listing unpaginated", self.name)
                items, rv = [], ""
                page = await self.client.list(
                    self.resource,
                    sel.namespace,
                    label_selector=sel.label_selector,
                    field_selector=sel.field_selector,
                )
            items.extend(page.get("items") or ())
            meta = page.get("metadata") or {}
            rv = rv or str(meta.get("resourceVersion", ""))
            token = meta.get("continue") or None
            if not token:
                break
        self.stats.lists += 1
        self._replace(items, rv)

    def _replace(self, items: list[Obj], rv: str) -> None:
        kind = self.resource.kind
        fresh: dict[str, Obj] = {}
        keep = self.keep
        for obj in items:
            obj.setdefault("kind", kind)  # list items omit kind; handlers may want it
            if keep is None or keep(obj):
                fresh[object_key(obj)] = obj
        for key in self.cache.list_keys():
            if key not in fresh:
                old = self.cache.remove(key)
                if old is not None:
                    self._dispatch_delete(old)
        for key, obj in fresh.items():
            old = self.cache.get(key)
            if old is None or _rv(old) != _rv(obj):  # unchanged objects: no handler calls
                self._dispatch_upsert(obj)
        self.resource_version = rv
        self.synced.set()
        self._allowed()

    # --- watch --------------------------------------------------------------------------
    async def _watch_until_gone(self) -> None:
        """Watch and resume until the server says our resourceVersion is gone."""
        failures = 0
        while True:
            try:
                await self._watch_once()
                failures = 0
            except Gone:
                return
            except KubeError as e:
                self.stats.errors += 1
                failures += 1
                if not self._refused(e):
                    log.info(
                        "%s: watch broke (%s), resuming at %s", self.name, e, self.resource_version
                    )
                await asyncio.sleep(self._backoff(failures, e))

    async def _watch_once(self) -> None:
        sel = self.selection
        self.stats.watches += 1
        async with self.client.watch(
            self.resource,
            sel.namespace,
            resource_version=self.resource_version,
            label_selector=sel.label_selector,
            field_selector=sel.field_selector,
            timeout_seconds=self.settings.watch_timeout_s,
        ) as events:
            self._allowed()
            async for ev in events:
                self.handle(ev.type, ev.object)

    def handle(self, event_type: str, obj: Obj) -> None:
        """Apply one watch event to the cache and tell the handlers (no I/O)."""
        if event_type == "BOOKMARK":
            self.stats.bookmarks += 1
        elif event_type == "DELETED" or (self.keep is not None and not self.keep(obj)):
            self.stats.events += 1
            if self.cache.remove(object_key(obj)) is not None:
                self._dispatch_delete(obj)
        else:
            self.stats.events += 1
            self._dispatch_upsert(obj)
        rv = (obj.get("metadata") or {}).get("resourceVersion")
        if rv:
            self.resource_version = str(rv)

    # --- handlers -----------------------------------------------------------------------
    # Handlers run inline for every event (four per sandbox in a burst), so dispatch goes
    # straight to the registered functions: no per-event wrapper calls.
    def _dispatch_upsert(self, obj: Obj) -> None:
        old = self.cache.upsert(obj)
        if old is None:
            for add in self._on_add:
                try:
                    add(obj)
                except Exception:
                    log.exception("%s: event handler %r failed", self.name, add)
        else:
            for update in self._on_update:
                try:
                    update(old, obj)
                except Exception:
                    log.exception("%s: event handler %r failed", self.name, update)

    def _dispatch_delete(self, obj: Obj) -> None:
        for delete in self._on_delete:
            try:
                delete(obj)
            except Exception:
                log.exception("%s: event handler %r failed", self.name, delete)

    def _refused(self, error: KubeError) -> bool:
        """Note a 403 (logged once, as an error); whether ``error`` was one."""
        if not isinstance(error, Forbidden):
            return False
        if self.forbidden is None:
            log.error("%s: list/watch forbidden (403), the cache is stale: %s", self.name, error)
        self.forbidden = str(error)
        return True

    def _allowed(self) -> None:
        if self.forbidden is not None:
            log.info("%s: list/watch allowed again", self.name)
            self.forbidden = None

    def _backoff(self, failures: int, error: KubeError) -> float:
        return self.settings.backoff.delay(failures, error.retry_after_s, self._rng)


def _rv(obj: Obj) -> str:
    return str((obj.get("metadata") or {}).get("resourceVersion", ""))
