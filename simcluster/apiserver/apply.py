"""Server-side apply: field ownership in ``metadata.managedFields``, conflicts, force.

Each manager owns a set of fields (paths, written as upstream's ``FieldsV1``: ``f:<field>``,
``k:{"name":"c"}`` for an item of a list keyed by a merge key, ``v:<value>`` for a member of
a set such as ``finalizers``). An apply by manager M with configuration C, as upstream's
structured-merge-diff does it:

- C's fields are M's new set; a field another manager owns whose live value differs from
  C's is a conflict — 409 with every conflict, in upstream's words — unless ``force=true``,
  which moves those fields to M;
- C is merged into the live object (lists of maps by their merge key, other lists whole);
- fields M owned before and no longer applies are removed, unless another manager owns them;
- an object without ``managedFields`` (created by a plain POST: simcluster records ownership
  only for objects that apply touched, so the burst's creates stay as cheap as they were)
  has all its fields owned by ``before-first-apply``, as upstream treats one.

An update (PUT/PATCH) of an object that has ``managedFields`` gives the fields it changed to
its manager (``fieldManager``, operation ``Update``) and takes them from the others; fields
it removed leave every set. Server-owned fields (name, namespace, uid, resourceVersion,
generation, timestamps, status where the kind has a status subresource) are owned by no one.

Not modelled: lists of scalars other than ``finalizers`` are atomic (upstream: sets where the
schema says so), merge keys come from ``patch``'s table by field name rather than the schema,
status writes are not attributed, and ``.`` entries of maps are not written.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from typing import Any

from simcluster.apiserver.meta import rfc3339
from simcluster.apiserver.patch import merge_key_for, merge_patch, strategic_merge_patch
from simcluster.apiserver.resources import ResourceType
from simcluster.errors import ApiError, BadRequest, Conflict, Invalid

__all__ = [
    "BEFORE_FIRST_APPLY",
    "Ownership",
    "applied_fields",
    "conflict_error",
    "for_create",
    "merge_into",
    "prepare",
    "record_update",
]

Obj = dict[str, Any]
Path = tuple[str, ...]
BEFORE_FIRST_APPLY = "before-first-apply"
_SET_FIELDS = frozenset({"finalizers"})
_SERVER_META = frozenset(
    {"name", "namespace", "uid", "resourceVersion", "generation", "creationTimestamp",
     "deletionTimestamp", "deletionGracePeriodSeconds", "managedFields", "selfLink",
     "generateName"}
)  # fmt: skip


def _configured(obj: Obj, has_status: bool) -> Obj:
    """What of ``obj`` can be owned: not its type, its identity or server-set metadata."""
    out = {k: v for k, v in obj.items() if k not in ("apiVersion", "kind")}
    if has_status:
        out.pop("status", None)
    meta = {k: v for k, v in (obj.get("metadata") or {}).items() if k not in _SERVER_META}
    if meta:
        out["metadata"] = meta
    else:
        out.pop("metadata", None)
    return out


def _walk(value: Obj, prefix: Path) -> Iterator[Path]:
    for name, v in value.items():
        path = (*prefix, f"f:{name}")
        key = merge_key_for(name, v) if isinstance(v, list) else None
        if isinstance(v, dict) and v:
            yield from _walk(v, path)
        elif isinstance(v, list) and name in _SET_FIELDS:
            yield from ((*path, f"v:{json.dumps(x)}") for x in v)
        elif key is not None and all(isinstance(i, dict) and key in i for i in v):
            for item in v:
                member = (*path, "k:" + json.dumps({key: item[key]}, separators=(",", ":")))
                yield member
                yield from _walk(item, member)
        else:
            yield path


def applied_fields(obj: Obj, has_status: bool) -> set[Path]:
    """The fields ``obj`` sets, as paths."""
    return set(_walk(_configured(obj, has_status), ()))


def _step(node: Any, element: str) -> tuple[bool, Any]:
    kind, _, rest = element.partition(":")
    if kind == "f" and isinstance(node, dict) and rest in node:
        return True, node[rest]
    if kind == "k" and isinstance(node, list):
        want = json.loads(rest)
        for item in node:
            if isinstance(item, dict) and all(item.get(k) == v for k, v in want.items()):
                return True, item
    if kind == "v" and isinstance(node, list) and json.loads(rest) in node:
        return True, json.loads(rest)
    return False, None


def value_at(obj: Any, path: Path) -> tuple[bool, Any]:
    node = obj
    for element in path:
        found, node = _step(node, element)
        if not found:
            return False, None
    return True, node


def remove_at(obj: Any, path: Path) -> None:
    found, parent = value_at(obj, path[:-1])
    if not found:
        return
    kind, _, rest = path[-1].partition(":")
    if kind == "f" and isinstance(parent, dict):
        parent.pop(rest, None)
    elif isinstance(parent, list):
        found, item = _step(parent, path[-1])
        if found:
            parent.remove(item)


def path_string(path: Path) -> str:
    """A path as upstream's ``fieldpath.Path.String`` prints it: ``.spec.containers[name="c"]``."""
    out = ""
    for element in path:
        kind, _, rest = element.partition(":")
        if kind == "f":
            out += f".{rest}"
        elif kind == "k":
            keys = ",".join(f"{k}={json.dumps(v)}" for k, v in json.loads(rest).items())
            out += f"[{keys}]"
        else:
            out += f"[={rest}]"
    return out


# --- FieldsV1 ----------------------------------------------------------------------------
def encode(paths: set[Path]) -> Obj:
    root: Obj = {}
    for path in sorted(paths):
        node = root
        for element in path:
            node = node.setdefault(element, {})
    _mark_members(root, paths, ())
    return root


def _mark_members(node: Obj, paths: set[Path], prefix: Path) -> None:
    for element, child in node.items():
        path = (*prefix, element)
        if child and path in paths:
            child["."] = {}
        _mark_members(child, paths, path)


def decode(fields: Any, prefix: Path = ()) -> set[Path]:
    out: set[Path] = set()
    if not isinstance(fields, dict):
        return out
    for element, child in fields.items():
        if element == ".":
            out.add(prefix)
            continue
        path = (*prefix, element)
        if not child:
            out.add(path)
        else:
            out |= decode(child, path)
    return out


class Ownership:
    """The managers of one object and the fields each owns, from ``managedFields``."""

    def __init__(self, entries: list[Obj]) -> None:
        self.entries = [dict(e) for e in entries if isinstance(e, dict)]
        self.sets = [decode(e.get("fieldsV1")) for e in self.entries]

    @classmethod
    def of(cls, live: Obj, has_status: bool, api_version: str) -> Ownership:
        entries = (live.get("metadata") or {}).get("managedFields")
        if isinstance(entries, list) and entries:
            return cls(entries)
        everything = applied_fields(live, has_status)
        first = {"manager": BEFORE_FIRST_APPLY, "operation": "Update", "apiVersion": api_version}
        own = cls([])
        own.entries, own.sets = [first], [everything]
        return own

    def _index(self, manager: str, operation: str) -> int:
        for i, e in enumerate(self.entries):
            if e.get("manager") == manager and e.get("operation") == operation:
                return i
        self.entries.append({"manager": manager, "operation": operation})
        self.sets.append(set())
        return len(self.entries) - 1

    def conflicts(self, manager: str, fields: set[Path], live: Obj, applied: Obj) -> list[Obj]:
        """(entry, path) of every field another manager owns with a different live value."""
        found = []
        for entry, owned in zip(self.entries, self.sets, strict=True):
            if entry.get("manager") == manager and entry.get("operation") == "Apply":
                continue
            for path in sorted(fields & owned):
                here, value = value_at(live, path)
                if here and (path[-1].startswith("f:")) and value != value_at(applied, path)[1]:
                    found.append({"entry": entry, "path": path})
        return found

    def apply(
        self, manager: str, fields: set[Path], taken: set[Path], api_version: str
    ) -> set[Path]:
        """Record M's apply; ``taken`` (forced conflicts) leave the others. Returns the fields
        M no longer applies and nobody else owns (to be removed)."""
        i = self._index(manager, "Apply")
        dropped = self.sets[i] - fields
        self.sets[i] = set(fields)
        for j, owned in enumerate(self.sets):
            if j != i:
                owned -= taken
        others = [s for j, s in enumerate(self.sets) if j != i]
        self._stamp(i, api_version)
        return {p for p in dropped if not any(_under(q, p) for s in others for q in s)}

    def update(
        self, manager: str, changed: set[Path], removed: set[Path], api_version: str
    ) -> None:
        i = self._index(manager, "Update")
        for j, owned in enumerate(self.sets):
            owned -= removed
            if j != i:
                owned -= changed
        self.sets[i] |= changed
        self._stamp(i, api_version)

    def _stamp(self, i: int, api_version: str) -> None:
        self.entries[i].update(apiVersion=api_version, time=rfc3339(), fieldsType="FieldsV1")

    def managed_fields(self) -> list[Obj]:
        out = []
        for entry, owned in zip(self.entries, self.sets, strict=True):
            if owned:
                out.append({**entry, "fieldsType": "FieldsV1", "fieldsV1": encode(owned)})
        return out


def _under(path: Path, prefix: Path) -> bool:
    return path[: len(prefix)] == prefix


def changed_fields(old: Obj, new: Obj, has_status: bool) -> tuple[set[Path], set[Path]]:
    """(fields ``new`` sets that ``old`` did not or to another value, fields it dropped)."""
    before, after = applied_fields(old, has_status), applied_fields(new, has_status)
    changed = {p for p in after if p not in before or value_at(old, p) != value_at(new, p)}
    return changed, before - after


def _manager_text(entry: Obj) -> str:
    text = json.dumps(entry.get("manager", ""))
    if entry.get("operation") == "Update":
        text += f" using {entry.get('apiVersion', '')}"
        if entry.get("time"):
            text += f" at {entry['time']}"
    return text


def conflict_error(conflicts: list[Obj]) -> ApiError:
    """Upstream's ``NewConflictError``: 409 with one ``FieldManagerConflict`` cause each."""
    causes = [
        {"reason": "FieldManagerConflict", "message": f"conflict with {_manager_text(c['entry'])}",
         "field": path_string(c["path"])}
        for c in conflicts
    ]  # fmt: skip
    if len(conflicts) == 1:
        c = conflicts[0]
        message = (
            f"Apply failed with 1 conflict: conflict with {_manager_text(c['entry'])}: "
            f"{path_string(c['path'])}"
        )
    else:
        by: dict[str, list[str]] = {}
        for c in conflicts:
            by.setdefault(_manager_text(c["entry"]), []).append(path_string(c["path"]))
        lines = []
        for manager in sorted(by):
            lines.append(f"conflicts with {manager}:")
            lines.extend(f"- {p}" for p in by[manager])
        message = f"Apply failed with {len(conflicts)} conflicts: " + "\n".join(lines)
    err = Conflict(message, details={"causes": causes})
    return err


def prepare(rt: ResourceType, name: str, body: Any, manager: str) -> tuple[Obj, set[Path]]:
    """The applied configuration (named as the URL) and its fields; 422 without a manager."""
    if not manager:
        field, msg = (
            "metadata.managedFields.fieldManager",
            "Required value: is required for apply patch",
        )
        raise Invalid.for_object(rt.kind, rt.group, name, [("FieldValueRequired", field, msg)])
    if not isinstance(body, dict):
        raise BadRequest("the applied configuration must be an object")
    if (body.get("metadata") or {}).get("name", name) != name:
        raise BadRequest("the name of the applied object does not match the name on the URL")
    config = copy.deepcopy(body)
    config.setdefault("metadata", {})["name"] = name
    return config, applied_fields(config, rt.has_status)


def for_create(manager: str, fields: set[Path], api_version: str) -> list[Obj]:
    """The managedFields of an object apply creates: the manager owns what it applied."""
    own = Ownership([])
    own.apply(manager, fields, set(), api_version)
    return own.managed_fields()


def merge_into(
    rt: ResourceType, live: Obj, config: Obj, fields: set[Path], manager: str, *, force: bool
) -> tuple[Obj, list[Obj] | None]:
    """(the object with ``config`` applied, its managedFields); 409 on conflicts unless
    forced. An apply that changes nothing keeps the live managedFields (no write)."""
    own = Ownership.of(live, rt.has_status, rt.api_version)
    conflicts = own.conflicts(manager, fields, live, config)
    if conflicts and not force:
        raise conflict_error(conflicts)
    before = [set(s) for s in own.sets]
    dropped = own.apply(manager, fields, {c["path"] for c in conflicts}, rt.api_version)
    merge = strategic_merge_patch if rt.builtin else merge_patch
    merged = merge(copy.deepcopy(live), config)
    for path in sorted(dropped, key=len, reverse=True):
        remove_at(merged, path)
    merged["metadata"]["resourceVersion"] = live["metadata"]["resourceVersion"]
    same = own.sets == before and _body(merged) == _body(live) and same_metadata(merged, live)
    return merged, (live["metadata"].get("managedFields") if same else own.managed_fields())


def _body(o: Obj) -> Obj:
    return {k: v for k, v in o.items() if k not in ("metadata", "status", "apiVersion", "kind")}


def record_update(
    has_status: bool,
    api_version: str,
    old: Obj,
    merged: Obj,
    manager: str,
    managed: list[Obj] | None,
) -> None:
    """``merged``'s managedFields: what an apply recorded, or, for an update of an object
    apply has touched, the fields it changed given to its manager."""
    if managed is not None:
        merged["metadata"]["managedFields"] = managed
        return
    entries = old["metadata"].get("managedFields")
    if not entries:
        return
    changed, removed = changed_fields(old, merged, has_status)
    if changed or removed:
        own = Ownership(entries)
        own.update(manager or "unknown", changed, removed, api_version)
        merged["metadata"]["managedFields"] = own.managed_fields()


def same_metadata(a: Obj, b: Obj) -> bool:
    """``a`` and ``b`` have the same metadata but for managedFields and resourceVersion."""
    return _meta(a) == _meta(b)


def _meta(o: Obj) -> Obj:
    return {k: v for k, v in o["metadata"].items() if k not in ("managedFields", "resourceVersion")}
