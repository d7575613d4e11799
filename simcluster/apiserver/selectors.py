"""Label and field selectors with the syntax and error messages of the real API server.

Label selectors support ``=``, ``==``, ``!=``, ``in``, ``notin``, existence (``key``) and
non-existence (``!key``). Field selectors support ``=``, ``==`` and ``!=`` on the fields each
resource declares selectable (the same short list upstream supports); anything else is the
real ``400 BadRequest`` "field label not supported".
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from simcluster.errors import BadRequest

__all__ = ["FieldSelector", "LabelSelector", "Requirement", "get_path"]

_LABEL_KEY = re.compile(
    r"^([a-z0-9A-Z]([-a-z0-9A-Z.]*[a-z0-9A-Z])?/)?[a-zA-Z0-9]([-_.a-zA-Z0-9]*[a-zA-Z0-9])?$"
)


@dataclass(frozen=True, slots=True)
class Requirement:
    key: str
    op: str  # "=", "!=", "in", "notin", "exists", "!"
    values: frozenset[str] = frozenset()

    def matches(self, labels: Mapping[str, str]) -> bool:
        present = self.key in labels
        if self.op == "exists":
            return present
        if self.op == "!":
            return not present
        if self.op in ("=", "in"):
            return present and labels[self.key] in self.values
        # "!=" and "notin" match objects without the label, as upstream.
        return not present or labels[self.key] not in self.values


def _split_top(text: str) -> list[str]:
    """Split on commas that are not inside parentheses."""
    parts: list[str] = []
    cur: list[str] = []
    depth = 0
    for ch in text:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    parts.append("".join(cur))
    return [p.strip() for p in parts if p.strip()]


_SET_RE = re.compile(r"^(\S+)\s+(in|notin)\s+\((.*)\)$")


def _check_key(key: str, text: str) -> str:
    if not _LABEL_KEY.match(key):
        raise BadRequest(f"unable to parse requirement: invalid label key {key!r} in {text!r}")
    return key


def _parse_requirement(text: str) -> Requirement:
    m = _SET_RE.match(text)
    if m:
        key, op, vals = m.groups()
        values = frozenset(v.strip() for v in vals.split(",") if v.strip())
        return Requirement(_check_key(key, text), op, values)
    for op in ("!=", "==", "="):
        if op in text:
            key, _, value = text.partition(op)
            norm = "=" if op == "==" else op
            return Requirement(_check_key(key.strip(), text), norm, frozenset({value.strip()}))
    if text.startswith("!"):
        return Requirement(_check_key(text[1:].strip(), text), "!")
    return Requirement(_check_key(text, text), "exists")


@dataclass(frozen=True, slots=True)
class LabelSelector:
    requirements: tuple[Requirement, ...] = ()

    @classmethod
    def parse(cls, text: str | None) -> LabelSelector:
        if not text:
            return cls()
        return cls(tuple(_parse_requirement(p) for p in _split_top(text)))

    @property
    def empty(self) -> bool:
        return not self.requirements

    def matches(self, labels: Mapping[str, str] | None) -> bool:
        labels = labels or {}
        return all(r.matches(labels) for r in self.requirements)


def get_path(obj: Mapping[str, Any], path: str) -> Any:
    cur: Any = obj
    for part in path.split("."):
        if not isinstance(cur, Mapping):
            return None
        cur = cur.get(part)
    return cur


@dataclass(frozen=True, slots=True)
class FieldSelector:
    terms: tuple[tuple[str, bool, str], ...] = ()  # (path, equal?, value)

    @classmethod
    def parse(cls, text: str | None, allowed: frozenset[str]) -> FieldSelector:
        if not text:
            return cls()
        terms = []
        for part in _split_top(text):
            if "!=" in part:
                path, _, value = part.partition("!=")
                eq = False
            elif "==" in part:
                path, _, value = part.partition("==")
                eq = True
            elif "=" in part:
                path, _, value = part.partition("=")
                eq = True
            else:
                raise BadRequest(f"invalid selector: '{text}'; can't understand '{part}'")
            path = path.strip()
            if path not in allowed:
                raise BadRequest(f"field label not supported: {path}")
            terms.append((path, eq, value.strip()))
        return cls(tuple(terms))

    @property
    def empty(self) -> bool:
        return not self.terms

    def value_of(self, path: str) -> str | None:
        """The value an equality term pins ``path`` to (used for index lookups)."""
        for p, eq, v in self.terms:
            if p == path and eq:
                return v
        return None

    def matches(
        self, obj: Mapping[str, Any], getter: Callable[[Mapping[str, Any], str], Any] = get_path
    ) -> bool:
        for path, eq, value in self.terms:
            actual = getter(obj, path)
            actual_s = (
                ""
                if actual is None
                else str(actual).lower()
                if isinstance(actual, bool)
                else str(actual)
            )
            if (actual_s == value) != eq:
                return False
        return True
