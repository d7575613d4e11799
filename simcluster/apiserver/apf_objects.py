"""FlowSchema and PriorityLevelConfiguration objects (flowcontrol.apiserver.k8s.io/v1) as
flow control configuration, applied at runtime.

Why: Sandman's manifests ship their own APF objects (binds in a level of their own, so a
create flood cannot starve them); a burst against simcluster should run under exactly those
objects, not under profile constants that merely resemble them. So every write of either kind
rebuilds the applied part of the configuration (a store listener: a handful of objects, in
the write itself, so the next request is classified by it).

Matching is upstream's (``apiserver/pkg/util/flowcontrol/rule_matching.go``): a schema
matches when one of its rules has a matching subject (User/Group name or ``*``,
ServiceAccount namespace and name or ``*``) and a matching resource rule (verbs, apiGroups,
``resource/subresource`` or ``*``, namespaces or ``*``, ``clusterScope`` for cluster-scoped
requests) or non-resource rule (verbs, nonResourceURLs with a trailing ``*``). A level's
``nominalConcurrencyShares`` (default 30) is its share of the server's budget
(``flowcontrol.py``); ``limitResponse.type: Reject`` means no queueing; ``type: Exempt`` is
never limited.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from simcluster.apiserver.auth import User
from simcluster.apiserver.flowcontrol import (
    DEFAULT_PRECEDENCE,
    DEFAULT_SHARES,
    FlowControl,
    FlowSchema,
    PriorityLevel,
)
from simcluster.apiserver.rbac import Attributes, dicts, strings
from simcluster.apiserver.store import Event, Store

__all__ = ["AppliedFlowConfig", "PolicyRules", "level_of", "schema_of"]

_GROUP = "flowcontrol.apiserver.k8s.io"
_KEYS = frozenset({f"{_GROUP}/flowschemas", f"{_GROUP}/prioritylevelconfigurations"})
Obj = dict[str, Any]


def _field(obj: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    value = obj.get(key)
    return value if isinstance(value, dict) else {}


def _subject_matches(subject: Mapping[str, Any], user: User) -> bool:
    kind = subject.get("kind")
    if kind == "User":
        name = _field(subject, "user").get("name")
        return name == "*" or name == user.name
    if kind == "Group":
        name = _field(subject, "group").get("name")
        return name == "*" or name in user.groups
    if kind == "ServiceAccount":
        sa = user.service_account
        spec = _field(subject, "serviceAccount")
        return (
            sa is not None and sa[0] == spec.get("namespace") and spec.get("name") in ("*", sa[1])
        )
    return False


def _url_matches(rule_url: str, path: str) -> bool:
    if rule_url == "*" or rule_url == path:
        return True
    prefix = rule_url[:-1] if rule_url.endswith("*") else rule_url + "/"
    return path.startswith(prefix)


def _resource_rule_matches(rule: Mapping[str, Any], a: Attributes) -> bool:
    verbs, groups = strings(rule.get("verbs")), strings(rule.get("apiGroups"))
    resources = strings(rule.get("resources"))
    combined = f"{a.resource}/{a.subresource}" if a.subresource else a.resource
    if not ("*" in verbs or a.verb in verbs) or not ("*" in groups or a.group in groups):
        return False
    if not ("*" in resources or combined in resources):
        return False
    if not a.namespace:
        return bool(rule.get("clusterScope"))
    namespaces = strings(rule.get("namespaces"))
    return "*" in namespaces or a.namespace in namespaces


def _non_resource_rule_matches(rule: Mapping[str, Any], a: Attributes) -> bool:
    verbs = strings(rule.get("verbs"))
    if not ("*" in verbs or a.verb in verbs):
        return False
    return any(_url_matches(u, a.path) for u in strings(rule.get("nonResourceURLs")))


@dataclass(frozen=True, slots=True)
class PolicyRules:
    """One ``PolicyRulesWithSubjects`` of an applied FlowSchema (kept as its JSON)."""

    subjects: tuple[Mapping[str, Any], ...]
    resource_rules: tuple[Mapping[str, Any], ...]
    non_resource_rules: tuple[Mapping[str, Any], ...]

    def matches(self, user: User, attrs: Attributes) -> bool:
        if not any(_subject_matches(s, user) for s in self.subjects):
            return False
        if attrs.resource_request:
            return any(_resource_rule_matches(r, attrs) for r in self.resource_rules)
        return any(_non_resource_rule_matches(r, attrs) for r in self.non_resource_rules)


def schema_of(obj: Obj) -> FlowSchema:
    spec = _field(obj, "spec")
    rules = tuple(
        PolicyRules(
            dicts(r.get("subjects")),
            dicts(r.get("resourceRules")),
            dicts(r.get("nonResourceRules")),
        )
        for r in dicts(spec.get("rules"))
    )
    precedence = spec.get("matchingPrecedence")
    return FlowSchema(
        obj["metadata"]["name"],
        str(_field(spec, "priorityLevelConfiguration").get("name", "")),
        precedence=precedence if isinstance(precedence, int) else DEFAULT_PRECEDENCE,
        rules=rules,
    )


def level_of(obj: Obj, default_queue_wait_s: float) -> PriorityLevel:
    spec = _field(obj, "spec")
    name = obj["metadata"]["name"]
    if spec.get("type") == "Exempt":
        return PriorityLevel(name, exempt=True)
    limited = _field(spec, "limited")
    shares = limited.get("nominalConcurrencyShares")
    reject = _field(limited, "limitResponse").get("type") == "Reject"
    return PriorityLevel(
        name,
        None,
        None,
        0.0 if reject else default_queue_wait_s,
        shares=shares if isinstance(shares, int) and shares >= 0 else DEFAULT_SHARES,
    )


class AppliedFlowConfig:
    """Keeps ``flow`` configured by the APF objects in ``store``."""

    def __init__(self, store: Store, flow: FlowControl, default_queue_wait_s: float = 0.25) -> None:
        self.store = store
        self.flow = flow
        self.default_queue_wait_s = default_queue_wait_s
        store.add_listener(self._on_event)
        self.refresh()

    def _on_event(self, event: Event) -> None:
        if event.key in _KEYS:
            self.refresh()

    def refresh(self) -> None:
        levels = [
            level_of(o, self.default_queue_wait_s)
            for o in self.store.iter(f"{_GROUP}/prioritylevelconfigurations")
        ]
        schemas = [schema_of(o) for o in self.store.iter(f"{_GROUP}/flowschemas")]
        self.flow.reconfigure(levels, schemas)
