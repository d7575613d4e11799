"""An indexed in-memory cache of Kubernetes objects (client-go's ``cache.Indexer``).

Informers own the writes; everyone else reads. Objects are the decoded JSON dicts exactly as
the API server sent them and must be treated as immutable (an update replaces the dict), so
readers may keep references without copying.

Indexes map a value computed from an object (for example its ``spec.nodeName``) to the keys
of the objects with that value, so "every pod on node X" is a dict lookup instead of a scan.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

__all__ = ["Cache", "IndexFunc", "Obj", "object_key"]

Obj = dict[str, Any]
#: Values an object is indexed under (none, one or several).
IndexFunc = Callable[[Obj], Iterable[str]]


def object_key(obj: Mapping[str, Any]) -> str:
    """``namespace/name``, or ``name`` for cluster-scoped objects (client-go's key)."""
    meta = obj.get("metadata") or {}
    ns = meta.get("namespace")
    return f"{ns}/{meta.get('name', '')}" if ns else str(meta.get("name", ""))


class Cache:
    __slots__ = ("_index_funcs", "_indexes", "_items")

    def __init__(self, indexers: Mapping[str, IndexFunc] | None = None) -> None:
        self._items: dict[str, Obj] = {}
        self._index_funcs = dict(indexers or {})
        self._indexes: dict[str, dict[str, set[str]]] = {n: {} for n in self._index_funcs}

    def __len__(self) -> int:
        return len(self._items)

    def __contains__(self, key: object) -> bool:
        return key in self._items

    def __iter__(self) -> Iterator[Obj]:
        return iter(list(self._items.values()))

    def get(self, key: str) -> Obj | None:
        return self._items.get(key)

    def list_keys(self) -> list[str]:
        return list(self._items)

    def by_index(self, index: str, value: str) -> list[Obj]:
        """Objects whose index function yielded ``value``."""
        keys = self._indexes[index].get(value, ())
        return [self._items[k] for k in keys]

    def index_values(self, index: str) -> list[str]:
        return [v for v, keys in self._indexes[index].items() if keys]

    # --- writes (the informer) ------------------------------------------------------------
    def upsert(self, obj: Obj) -> Obj | None:
        """Store ``obj``; return the object it replaced, if any."""
        key = object_key(obj)
        old = self._items.get(key)
        if old is not None:
            self._unindex(key, old)
        self._items[key] = obj
        self._index(key, obj)
        return old

    def remove(self, key: str) -> Obj | None:
        old = self._items.pop(key, None)
        if old is not None:
            self._unindex(key, old)
        return old

    def _index(self, key: str, obj: Obj) -> None:
        for name, fn in self._index_funcs.items():
            index = self._indexes[name]
            for value in fn(obj):
                index.setdefault(value, set()).add(key)

    def _unindex(self, key: str, obj: Obj) -> None:
        for name, fn in self._index_funcs.items():
            index = self._indexes[name]
            for value in fn(obj):
                keys = index.get(value)
                if keys is not None:
                    keys.discard(key)
                    if not keys:
                        del index[value]
