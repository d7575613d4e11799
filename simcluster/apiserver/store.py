"""The in-memory object store: one global resourceVersion, a bounded event history, watchers.

Like etcd behind the real server, every write gets the next global revision and is appended
to a history. Watches resume from any revision still in the history; older ones get
``410 Expired``. The history is a time window, as upstream's watch cache keeps events for a
while (``eventFreshDuration``, 75 s) rather than a number of them: an event older than
``window_s`` is dropped even on a quiet cluster; ``history`` caps the count as well (memory,
and tests that force a 410). Each event's JSON is
encoded once and shared by all watchers, which is what lets one core deliver tens of
thousands of watch events per second.

Watchers whose field selector pins ``spec.nodeName`` or ``metadata.name`` are indexed by that
value, so 400 kubelets watching "their" pods cost one dict lookup per event, not 400 matches.
The history is indexed by ``spec.nodeName`` too, so a kubelet resumes by replaying its own
node's events, not by matching every event since its resourceVersion: when every watch was
dropped (the fault benchmark drops them every 3 s), 400 kubelets resuming over a history of
~13,000 events took ~3 s of the server's loop per drop, which stalled binds and status
writes.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import msgspec

from simcluster.apiserver.selectors import FieldSelector, LabelSelector, get_path
from simcluster.errors import Expired

__all__ = ["Event", "Listener", "Store", "Watcher"]

_INDEXED = ("spec.nodeName", "metadata.name")
#: Fields the history is indexed by: a kubelet's resume. (Not ``metadata.name``: one deque per
#: object name would cost more memory than the rare single-object resume saves.)
_HISTORY_INDEXED = ("spec.nodeName",)


def _field_value(obj: Any, path: str) -> str:
    value = get_path(obj, path)
    return "" if value is None else str(value)


_encode = msgspec.json.encode
Obj = dict[str, Any]
IndexKey = tuple[str, str, str]  # (resource key, indexed field path, value)


@dataclass(slots=True)
class Event:
    rv: int
    type: str  # ADDED | MODIFIED | DELETED
    key: str
    namespace: str
    obj: Obj
    old: Obj | None
    _json: bytes | None = None
    at: float = field(default_factory=time.monotonic)  # when it happened, for the window

    def object_json(self) -> bytes:
        if self._json is None:
            self._json = _encode(self.obj)
        return self._json


def line(event_type: str, object_json: bytes) -> bytes:
    return b'{"type":"' + event_type.encode() + b'","object":' + object_json + b"}\n"


Renderer = Callable[[str, Event], bytes]
Listener = Callable[[Event], None]


def default_render(event_type: str, event: Event) -> bytes:
    return line(event_type, event.object_json())


@dataclass(eq=False)
class Watcher:
    """One watch stream's filter and its queue of rendered lines (None = closed)."""

    key: str
    namespace: str | None
    labels: LabelSelector
    fields: FieldSelector
    bookmarks: bool
    render: Renderer = default_render
    max_queue: int = 200_000
    queue: asyncio.Queue[bytes | None] = field(default_factory=asyncio.Queue)
    last_rv: int = 0
    closed: bool = False
    after: int = 0  # events up to this revision are not the watch's (a resume from it)

    def matches(self, obj: Obj | None) -> bool:
        if obj is None:
            return False
        meta = obj["metadata"]
        if self.namespace is not None and meta.get("namespace") != self.namespace:
            return False
        return self.labels.matches(meta.get("labels")) and self.fields.matches(obj)

    def offer(self, event: Event) -> None:
        """Deliver ``event`` with upstream's selector transitions (ADDED/DELETED on (un)match)."""
        if self.closed or event.rv <= self.after:
            return
        new_ok = event.type != "DELETED" and self.matches(event.obj)
        old_ok = self.matches(event.old) if event.old is not None else False
        if event.type == "DELETED":
            kind = "DELETED" if self.matches(event.obj) else None
        elif new_ok and old_ok:
            kind = "MODIFIED"
        elif new_ok:
            kind = "ADDED"
        elif old_ok:
            kind = "DELETED"
        else:
            kind = None
        self.last_rv = event.rv
        if kind is not None:
            self.push(self.render(kind, event))

    def push(self, data: bytes | None) -> None:
        if self.closed:
            return
        if data is not None and self.queue.qsize() >= self.max_queue:
            data = None  # too slow a consumer: the real server drops it too
        if data is None:
            self.closed = True
        self.queue.put_nowait(data)

    def close(self) -> None:
        self.push(None)


class Store:
    """Objects by resource key → namespace → name, plus the event history."""

    def __init__(self, history: int = 10_000, window_s: float = 75.0) -> None:
        self.window_s = window_s
        self.rv = 0
        self._tables: dict[str, dict[str, dict[str, Obj]]] = {}
        self._history: deque[Event] = deque(maxlen=history)
        #: The same events by indexed field value (each event under the values of its new
        #: and old object), for replays to pinned watchers; emptied with the history.
        self._history_by: dict[IndexKey, deque[Event]] = {}
        self.compacted = 0
        self._watchers: dict[str, set[Watcher]] = {}
        self._indexed: dict[tuple[str, str, str], set[Watcher]] = {}
        self.force_expired = False  # fault injection: next resume gets 410
        self._listeners: list[Listener] = []

    def next_rv(self) -> int:
        self.rv += 1
        return self.rv

    # --- reads -------------------------------------------------------------------------
    def get(self, key: str, namespace: str, name: str) -> Obj | None:
        return self._tables.get(key, {}).get(namespace, {}).get(name)

    def count(self, key: str) -> int:
        return sum(len(t) for t in self._tables.get(key, {}).values())

    def iter(self, key: str, namespace: str | None = None) -> Iterator[Obj]:
        table = self._tables.get(key, {})
        if namespace is not None:
            yield from table.get(namespace, {}).values()
            return
        for ns_table in table.values():
            yield from ns_table.values()

    def iter_at(self, key: str, namespace: str | None, rv: int) -> list[Obj]:
        """The objects of ``key`` as they were at revision ``rv``: the current ones with
        the history's events after ``rv`` undone, newest first (what etcd's MVCC read at a
        revision gives the real server). ``410 Expired`` when the history no longer reaches
        back that far. It costs one pass over the events since ``rv``: for paginated lists
        and Exact reads, not for the burst's writes."""
        if rv >= self.rv:
            return list(self.iter(key, namespace))
        self._expire(time.monotonic())
        if rv < self.compacted:
            raise Expired("The resourceVersion for the provided list is too old.")
        state = {
            (o["metadata"].get("namespace", ""), o["metadata"]["name"]): o
            for o in self.iter(key, namespace)
        }
        history = self._history
        later = itertools.islice(history, _first_after(history, rv), None)
        for event in reversed([e for e in later if e.key == key]):
            if namespace is not None and event.namespace != namespace:
                continue
            at = (event.namespace, event.obj["metadata"]["name"])
            if event.type == "ADDED":
                state.pop(at, None)
            elif event.old is not None:
                state[at] = event.old
        return list(state.values())

    def namespace_is_empty(self, namespace: str) -> bool:
        return all(not t.get(namespace) for t in self._tables.values())

    def keys(self) -> list[str]:
        return list(self._tables)

    # --- writes ------------------------------------------------------------------------
    def put(self, key: str, obj: Obj, old: Obj | None) -> Event:
        """Store ``obj`` (metadata.resourceVersion already set by the caller via next_rv)."""
        meta = obj["metadata"]
        ns = meta.get("namespace", "")
        self._tables.setdefault(key, {}).setdefault(ns, {})[meta["name"]] = obj
        return self._emit(
            Event(int(meta["resourceVersion"]), "MODIFIED" if old else "ADDED", key, ns, obj, old)
        )

    def remove(self, key: str, obj: Obj) -> Event:
        """Remove ``obj``; the DELETED event carries a fresh resourceVersion, like upstream."""
        meta = obj["metadata"]
        ns = meta.get("namespace", "")
        table = self._tables.get(key, {}).get(ns, {})
        old = table.pop(meta["name"], None)
        rv = self.next_rv()
        final = dict(obj)
        final["metadata"] = dict(meta, resourceVersion=str(rv))
        return self._emit(Event(rv, "DELETED", key, ns, final, old))

    def _expire(self, now: float) -> None:
        """Drop the events older than the window; a resume from before them gets 410."""
        history, oldest = self._history, now - self.window_s
        while history and history[0].at < oldest:
            self.compacted = history.popleft().rv

    def _emit(self, event: Event) -> Event:
        self._expire(event.at)
        if len(self._history) == self._history.maxlen:
            self._forget(self._history[0])
        self._history.append(event)
        keys = _index_keys(event, _INDEXED)
        for k in keys:
            if k[1] in _HISTORY_INDEXED:
                self._history_by.setdefault(k, deque()).append(event)
        for w in list(self._watchers.get(event.key, ())):
            w.offer(event)
        for k in keys:
            for w in list(self._indexed.get(k, ())):
                w.offer(event)
        for listener in self._listeners:
            listener(event)
        return event

    def _forget(self, oldest: Event) -> None:
        """Compact ``oldest`` (the history's first event) out of the history's index."""
        self.compacted = oldest.rv
        for k in _index_keys(oldest, _HISTORY_INDEXED):
            events = self._history_by.get(k)
            while events and events[0].rv <= oldest.rv:  # in the history's order
                events.popleft()
            if not events:
                self._history_by.pop(k, None)

    # --- listeners ---------------------------------------------------------------------
    def add_listener(self, listener: Listener) -> None:
        """Call ``listener`` with every event, in order, after the watchers got it.

        For in-process controllers (the garbage collector): unlike a watcher, a listener has
        no queue, filter or history. It runs inside the write, so it must be quick, and the
        writes it causes belong on the next loop turn (``deferred.call_soon``). It runs after
        the watchers, so that what it causes reaches them after the event that caused it."""
        self._listeners.append(listener)

    def remove_listener(self, listener: Listener) -> None:
        self._listeners.remove(listener)

    # --- watch -------------------------------------------------------------------------
    def subscribe(self, w: Watcher, since: int | None) -> None:
        """Register ``w``; replay history after ``since`` (None: caller sends initial state)."""
        if since is not None:
            self._expire(time.monotonic())
            if self.force_expired or since < self.compacted:
                self.force_expired = False
                raise Expired(f"too old resource version: {since} ({self.compacted + 1})")
            self._replay(w, since)
            w.after = since  # a future revision: nothing until the store gets there
        w.last_rv = max(w.last_rv, self.rv if since is None else max(since, w.last_rv))
        pinned = _pinned(w)
        if pinned is not None:
            self._indexed.setdefault(pinned, set()).add(w)
        else:
            self._watchers.setdefault(w.key, set()).add(w)

    def _replay(self, w: Watcher, since: int) -> None:
        """Offer ``w`` the history after ``since``: only its index's events when its field
        selector pins an indexed field (the others cannot match it, before or after)."""
        pinned = _pinned(w)
        events = self._history
        if pinned is not None and pinned[1] in _HISTORY_INDEXED:
            events = self._history_by.get(pinned, deque())
        for event in itertools.islice(events, _first_after(events, since), None):
            if event.key == w.key:
                w.offer(event)

    def unsubscribe(self, w: Watcher) -> None:
        self._watchers.get(w.key, set()).discard(w)
        for path in _INDEXED:
            v = w.fields.value_of(path)
            if v is not None:
                self._indexed.get((w.key, path, v), set()).discard(w)

    def all_watchers(self) -> list[Watcher]:
        out = [w for ws in self._watchers.values() for w in ws]
        out.extend(w for ws in self._indexed.values() for w in ws)
        return out


def _index_keys(event: Event, paths: tuple[str, ...]) -> set[IndexKey]:
    """The index entries of ``event``: each field's value in its new and old object (an
    absent field is "": ``spec.nodeName=`` selects unbound pods, as upstream)."""
    keys = set()
    for path in paths:
        keys.add((event.key, path, _field_value(event.obj, path)))
        if event.old is not None:
            keys.add((event.key, path, _field_value(event.old, path)))
    return keys


def _pinned(w: Watcher) -> IndexKey | None:
    """The index entry of a watcher whose field selector pins an indexed field, if any."""
    for path in _INDEXED:
        value = w.fields.value_of(path)
        if value is not None:
            return (w.key, path, value)
    return None


def _first_after(events: deque[Event], since: int) -> int:
    """Index of the first event after revision ``since`` (events in revision order)."""
    lo, hi = 0, len(events)
    while lo < hi:
        mid = (lo + hi) // 2
        if events[mid].rv <= since:
            lo = mid + 1
        else:
            hi = mid
    return lo
