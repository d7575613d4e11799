"""The resource registry: which group/version/kinds exist, their scope, verbs and short names.

Built-in kinds come from ``resources.yaml``; CustomResourceDefinitions add their kinds at
runtime (``register_crd``) so custom resources are served like on a real cluster. Discovery,
URL routing and the store all read this one registry.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from importlib import resources as importlib_resources
from typing import Any

import yaml

__all__ = ["CREATE_ONLY", "DELETE_ANSWERS", "Registry", "ResourceType"]

_FIELD_SELECTORS: dict[str, frozenset[str]] = {
    "pods": frozenset(
        {
            "spec.nodeName",
            "spec.schedulerName",
            "spec.restartPolicy",
            "spec.serviceAccountName",
            "spec.hostNetwork",
            "status.phase",
            "status.podIP",
            "status.nominatedNodeName",
        }
    ),
    "events": frozenset(
        {
            "involvedObject.kind",
            "involvedObject.namespace",
            "involvedObject.name",
            "involvedObject.uid",
            "involvedObject.apiVersion",
            "involvedObject.resourceVersion",
            "involvedObject.fieldPath",
            "reason",
            "reportingComponent",
            "source",
            "type",
        }
    ),
    "secrets": frozenset({"type"}),
    "nodes": frozenset({"spec.unschedulable"}),
    "namespaces": frozenset({"status.phase"}),
    "replicationcontrollers": frozenset({"status.replicas"}),
    "jobs": frozenset({"status.successful"}),
}
# Virtual resources: POST computes an answer, nothing is stored.
CREATE_ONLY = frozenset(
    {
        "bindings",
        "selfsubjectreviews",
        "selfsubjectaccessreviews",
        "selfsubjectrulesreviews",
        "subjectaccessreviews",
        "localsubjectaccessreviews",
        "tokenreviews",
    }
)
# Resources in the "all" category (``kubectl get all``), as upstream.
_ALL = frozenset(
    {
        "pods", "services", "replicationcontrollers", "daemonsets", "deployments",
        "replicasets", "statefulsets", "jobs", "cronjobs", "horizontalpodautoscalers",
    }
)  # fmt: skip
_BASE_FIELDS = frozenset({"metadata.name", "metadata.namespace"})
# Kinds whose upstream Go types carry strategic-merge metadata (CRs do not: 415 there).
_VERBS = ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]
#: what a DELETE that removes an object answers (resources.yaml's last column): the object
#: itself, or a Status naming it (upstream's ``ReturnDeletedObject`` false, the default)
DELETE_ANSWERS = ("object", "status")


@dataclass(frozen=True, slots=True)
class ResourceType:
    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool
    short_names: tuple[str, ...] = ()
    subresources: tuple[str, ...] = ()
    builtin: bool = True
    singular: str = ""
    categories: tuple[str, ...] = ()
    #: one of DELETE_ANSWERS; custom resources answer a Status, as upstream
    delete_answer: str = "status"

    @property
    def key(self) -> str:
        """Storage key: one store per group/resource, shared by all versions."""
        return f"{self.group}/{self.plural}"

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def field_selectors(self) -> frozenset[str]:
        return _BASE_FIELDS | _FIELD_SELECTORS.get(self.plural, frozenset())

    @property
    def verbs(self) -> list[str]:
        if self.plural in CREATE_ONLY:
            return ["create"]
        return list(_VERBS)

    @property
    def has_status(self) -> bool:
        return "status" in self.subresources

    def discovery_entries(self) -> list[dict[str, Any]]:
        main: dict[str, Any] = {
            "name": self.plural,
            "singularName": self.singular or self.kind.lower(),
            "namespaced": self.namespaced,
            "kind": self.kind,
            "verbs": self.verbs,
        }
        if self.short_names:
            main["shortNames"] = list(self.short_names)
        if self.categories:
            main["categories"] = list(self.categories)
        out = [main]
        for sub in self.subresources:
            kind, verbs = self.kind, ["get", "patch", "update"]
            if sub == "binding":
                kind, verbs = "Binding", ["create"]
            elif sub == "eviction":
                kind, verbs = "Eviction", ["create"]
                out.append(_sub(self, sub, "Eviction", verbs, "policy", "v1"))
                continue
            elif sub == "token":
                out.append(
                    _sub(self, sub, "TokenRequest", ["create"], "authentication.k8s.io", "v1")
                )
                continue
            elif sub == "scale":
                out.append(_sub(self, sub, "Scale", verbs, "autoscaling", "v1"))
                continue
            elif sub == "finalize":
                verbs = ["update"]
            elif sub == "log":
                verbs = ["get"]
            elif sub in ("exec", "attach"):  # streams.py serves them (WebSocket upgrades)
                kind, verbs = f"Pod{sub.capitalize()}Options", ["create", "get"]
            out.append(_sub(self, sub, kind, verbs, None, None))
        return out


def _checked(group: str, version: str, row: list[Any]) -> list[Any]:
    """A resources.yaml row, or an error naming it: six columns, a known deleteAnswer."""
    where = f"resources.yaml: {group or 'core'}/{version} {row[:1]}"
    if len(row) != 6:
        raise ValueError(f"{where}: {len(row)} columns, want 6 (see the file's header)")
    if row[5] not in DELETE_ANSWERS:
        raise ValueError(f"{where}: deleteAnswer {row[5]!r} is not one of {DELETE_ANSWERS}")
    return row


def _sub(
    rt: ResourceType, sub: str, kind: str, verbs: list[str], group: str | None, version: str | None
) -> dict[str, Any]:
    d: dict[str, Any] = {
        "name": f"{rt.plural}/{sub}",
        "singularName": "",
        "namespaced": rt.namespaced,
        "kind": kind,
        "verbs": verbs,
    }
    if group is not None:
        d["group"] = group
        d["version"] = version
    return d


@dataclass
class Registry:
    """All served resource types, indexed for routing and kind lookup."""

    types: dict[tuple[str, str, str], ResourceType] = field(
        default_factory=dict
    )  # (group, version, plural)
    group_order: list[str] = field(default_factory=list)

    @classmethod
    def builtin(cls) -> Registry:
        text = (
            importlib_resources.files("simcluster.apiserver").joinpath("resources.yaml").read_text()
        )
        reg = cls()
        for group, versions in yaml.safe_load(text).items():
            for version, rows in versions.items():
                for row in rows:
                    plural, kind, namespaced, shorts, subs, answer = _checked(group, version, row)
                    cats = ("all",) if plural in _ALL else ()
                    rt = ResourceType(
                        group, version, plural, kind, namespaced, tuple(shorts), tuple(subs),
                        categories=cats, delete_answer=answer,
                    )  # fmt: skip
                    reg.add(rt)
        return reg

    def add(self, rt: ResourceType) -> None:
        if rt.group not in self.group_order:
            self.group_order.append(rt.group)
        self.types[(rt.group, rt.version, rt.plural)] = rt

    def remove_group_resource(self, group: str, plural: str) -> None:
        for key in [k for k in self.types if k[0] == group and k[2] == plural]:
            del self.types[key]
        if group and not any(k[0] == group for k in self.types):
            self.group_order.remove(group)

    def get(self, group: str, version: str, plural: str) -> ResourceType | None:
        return self.types.get((group, version, plural))

    def for_key(self, key: str) -> ResourceType | None:
        """A type stored under ``key`` (any of its versions: they share the store)."""
        return next((rt for rt in self.types.values() if rt.key == key), None)

    def versions(self, group: str) -> list[str]:
        seen: list[str] = []
        for g, v, _ in self.types:
            if g == group and v not in seen:
                seen.append(v)
        return seen

    def in_version(self, group: str, version: str) -> list[ResourceType]:
        return [rt for (g, v, _), rt in self.types.items() if g == group and v == version]

    def by_kind(self, api_version: str, kind: str) -> ResourceType | None:
        group, _, version = api_version.rpartition("/")
        for rt in self.in_version(group, version):
            if rt.kind == kind and rt.plural != "bindings":
                return rt
        return None

    def register_crd(self, crd: dict[str, Any]) -> list[ResourceType]:
        spec = crd.get("spec") or {}
        names = spec.get("names") or {}
        added = []
        for ver in spec.get("versions") or []:
            if not ver.get("served", True):
                continue
            subs = tuple(k for k in (ver.get("subresources") or {}) if k in ("status", "scale"))
            rt = ResourceType(
                group=spec.get("group", ""),
                version=ver["name"],
                plural=names.get("plural", ""),
                kind=names.get("kind", ""),
                namespaced=spec.get("scope") == "Namespaced",
                short_names=tuple(names.get("shortNames") or ()),
                subresources=subs,
                builtin=False,
                singular=names.get("singular", ""),
                categories=tuple(names.get("categories") or ()),
            )
            self.add(rt)
            added.append(rt)
        return added
