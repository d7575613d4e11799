"""Authorization as kube-apiserver does it with ``--authorization-mode=Node,RBAC``.

Why a model at all: Sandman's manifests claim least privilege, and that claim is only proven
by a server that refuses what they do not grant, with the message an operator would see on a
real cluster. So the rules here are upstream's, written out: the union of three authorizers,
tried in order, the first "allow" wins —

1. ``system:masters`` is always allowed (upstream's privileged-group authorizer);
2. node identities (``system:node:<name>`` in ``system:nodes``) get what the Node authorizer
   grants a kubelet (``node_rules.py``); anything else they do falls through to RBAC;
3. RBAC: the rules of every Role/ClusterRole bound to the user, one of its groups or its
   service account, by a ClusterRoleBinding (cluster-wide) or a RoleBinding (its namespace);
   rule matching is ``rbac/v1 RuleAllows`` (verbs, apiGroups, ``resource/subresource``,
   ``*/subresource``, resourceNames, nonResourceURLs with a trailing ``*``), aggregated
   ClusterRoles take the rules of the ClusterRoles their selectors match.

Cost: RBAC objects change rarely and requests come in bursts, so the bindings are indexed by
subject once per change (a store listener marks the index stale), each user's rules are
resolved once per index, and decisions are memoised per request attributes — a burst of pod
creates costs one dict lookup each.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Protocol

from simcluster.apiserver.auth import User
from simcluster.apiserver.node_rules import node_allows
from simcluster.apiserver.selectors import LabelSelector
from simcluster.apiserver.store import Event, Store
from simcluster.errors import BadRequest, Forbidden, SimclusterError

__all__ = [
    "AUTHORIZATION_MODES",
    "Attributes",
    "Authorizer",
    "Decision",
    "Rule",
    "dicts",
    "forbidden",
    "request_attributes",
    "strings",
]

AUTHORIZATION_MODES = ("always-allow", "rbac")
_GROUP = "rbac.authorization.k8s.io"
_KEYS = frozenset(
    f"{_GROUP}/{p}" for p in ("roles", "rolebindings", "clusterroles", "clusterrolebindings")
)
#: namespaces/<name>/<this> is a subresource of the namespace, not a resource in it
_NAMESPACE_SUBRESOURCES = frozenset({"status", "finalize"})
_DECISION_CACHE_MAX = 50_000


class _Info(Protocol):
    """dispatch.RequestInfo, which imports this module."""

    @property
    def verb(self) -> str: ...
    @property
    def group(self) -> str: ...
    @property
    def version(self) -> str: ...
    @property
    def resource(self) -> str: ...
    @property
    def subresource(self) -> str: ...
    @property
    def namespace(self) -> str | None: ...
    @property
    def name(self) -> str: ...


class Attributes(NamedTuple):
    """upstream's ``authorizer.Attributes``: who asks to do what to which object or path.

    A named tuple, not a frozen dataclass: one is built per request and is the memo's key,
    and a tuple is several times cheaper to build and hash."""

    user: User
    verb: str
    resource_request: bool = True
    group: str = ""
    version: str = ""
    resource: str = ""
    subresource: str = ""
    namespace: str = ""
    name: str = ""
    path: str = ""


def request_attributes(info: _Info, user: User, query: Mapping[str, str]) -> Attributes:
    """The attributes upstream's RequestInfoFactory derives from a resource request's URL:
    a namespace's own requests are in that namespace, and a list or watch narrowed by
    ``fieldSelector=metadata.name=X`` is about the object ``X``."""
    namespace, name = info.namespace or "", info.name
    if (
        info.resource == "namespaces"
        and name
        and (not info.subresource or info.subresource in _NAMESPACE_SUBRESOURCES)
    ):
        namespace = name
    if info.verb in ("list", "watch") and not name:
        name = _selected_name(query.get("fieldSelector") or "")
    return Attributes(
        user,
        info.verb,
        True,
        info.group,
        info.version,
        info.resource,
        info.subresource,
        namespace,
        name,
    )


def _selected_name(selector: str) -> str:
    for term in selector.split(","):
        key, sep, value = term.partition("=")
        if sep and key.strip() == "metadata.name":
            return value.lstrip("=").strip()
    return ""


@dataclass(frozen=True, slots=True)
class Decision:
    allowed: bool
    reason: str = ""


@dataclass(frozen=True, slots=True)
class Rule:
    """One PolicyRule, normalised for matching."""

    verbs: frozenset[str]
    groups: frozenset[str] = frozenset()
    resources: frozenset[str] = frozenset()
    names: frozenset[str] = frozenset()
    urls: tuple[str, ...] = ()

    @classmethod
    def of(cls, rule: Mapping[str, Any]) -> Rule:
        return cls(
            frozenset(strings(rule.get("verbs"))),
            frozenset(strings(rule.get("apiGroups"))),
            frozenset(strings(rule.get("resources"))),
            frozenset(strings(rule.get("resourceNames"))),
            strings(rule.get("nonResourceURLs")),
        )

    def allows(self, a: Attributes) -> bool:
        if a.verb not in self.verbs and "*" not in self.verbs:
            return False
        if not a.resource_request:
            return any(_url_matches(u, a.path) for u in self.urls)
        if a.group not in self.groups and "*" not in self.groups:
            return False
        combined = f"{a.resource}/{a.subresource}" if a.subresource else a.resource
        res = self.resources
        if (
            "*" not in res
            and combined not in res
            and not (a.subresource and f"*/{a.subresource}" in res)
        ):
            return False
        return not self.names or a.name in self.names

    def to_rule(self) -> dict[str, Any]:
        """As a SelfSubjectRulesReview reports it."""
        if self.urls:
            return {"verbs": sorted(self.verbs), "nonResourceURLs": list(self.urls)}
        out: dict[str, Any] = {
            "verbs": sorted(self.verbs),
            "apiGroups": sorted(self.groups),
            "resources": sorted(self.resources),
        }
        if self.names:
            out["resourceNames"] = sorted(self.names)
        return out


def strings(value: Any) -> tuple[str, ...]:
    """The strings of a list field; anything else (a stored object the validation let
    through with a wrong shape) is no strings, never a crash in every later request."""
    if not isinstance(value, list):
        return ()
    return tuple(v for v in value if isinstance(v, str))


def dicts(value: Any) -> tuple[dict[str, Any], ...]:
    """The objects of a list field (see ``strings``)."""
    if not isinstance(value, list):
        return ()
    return tuple(v for v in value if isinstance(v, dict))


def _url_matches(rule_url: str, path: str) -> bool:
    if rule_url == "*" or rule_url == path:
        return True
    return rule_url.endswith("*") and path.startswith(rule_url.rstrip("*"))


@dataclass(frozen=True, slots=True)
class _Grant:
    """One binding's grant to one subject: where it applies and which rules it gives."""

    namespace: str  # "" for a ClusterRoleBinding
    source: str  # upstream's describer text: 'ClusterRoleBinding "x" of ClusterRole "y" to ...'
    rules: tuple[Rule, ...]
    error: str = ""  # the role it names does not exist


@dataclass(frozen=True, slots=True)
class _UserRules:
    cluster: tuple[_Grant, ...]
    by_namespace: Mapping[str, tuple[_Grant, ...]]


@dataclass
class _Index:
    """Bindings by subject, built from the store once per change of an RBAC object."""

    grants: dict[tuple[str, str], list[_Grant]] = field(default_factory=dict)

    @classmethod
    def build(cls, store: Store) -> _Index:
        roles = {
            (o["metadata"].get("namespace", ""), o["metadata"]["name"]): _rules(o)
            for o in store.iter(f"{_GROUP}/roles")
        }
        cluster_roles = _cluster_roles(list(store.iter(f"{_GROUP}/clusterroles")))
        index = cls()
        for b in store.iter(f"{_GROUP}/clusterrolebindings"):
            index.add(b, "", roles, cluster_roles)
        for b in store.iter(f"{_GROUP}/rolebindings"):
            index.add(b, b["metadata"].get("namespace", ""), roles, cluster_roles)
        return index

    def add(
        self,
        binding: Mapping[str, Any],
        namespace: str,
        roles: Mapping[tuple[str, str], tuple[Rule, ...]],
        cluster_roles: Mapping[str, tuple[Rule, ...]],
    ) -> None:
        ref = binding.get("roleRef")
        ref = ref if isinstance(ref, dict) else {}
        kind, role = str(ref.get("kind", "")), str(ref.get("name", ""))
        found = roles.get((namespace, role)) if kind == "Role" else cluster_roles.get(role)
        error = "" if found is not None else f'{kind.lower()}.{_GROUP} "{role}" not found'
        name = binding["metadata"]["name"]
        for subject in dicts(binding.get("subjects")):
            key, described = _subject_key(subject, namespace)
            if namespace:
                source = f'RoleBinding "{name}/{namespace}" of {kind} "{role}" to {described}'
            else:
                source = f'ClusterRoleBinding "{name}" of {kind} "{role}" to {described}'
            grant = _Grant(namespace, source, found or (), error)
            self.grants.setdefault(key, []).append(grant)

    def for_user(self, user: User) -> _UserRules:
        keys = [("User", user.name), *(("Group", g) for g in user.groups)]
        cluster: list[_Grant] = []
        by_ns: dict[str, list[_Grant]] = {}
        for key in keys:
            for g in self.grants.get(key, ()):
                (by_ns.setdefault(g.namespace, []) if g.namespace else cluster).append(g)
        return _UserRules(tuple(cluster), {ns: tuple(gs) for ns, gs in by_ns.items()})


def _subject_key(subject: Mapping[str, Any], namespace: str) -> tuple[tuple[str, str], str]:
    kind, name = str(subject.get("kind", "")), str(subject.get("name", ""))
    if kind == "ServiceAccount":
        ns = str(subject.get("namespace") or namespace)
        return ("User", f"system:serviceaccount:{ns}:{name}"), f'ServiceAccount "{name}/{ns}"'
    return (kind, name), f'{kind} "{name}"'


def _rules(role: Mapping[str, Any]) -> tuple[Rule, ...]:
    return tuple(Rule.of(r) for r in dicts(role.get("rules")))


def _cluster_roles(objs: list[dict[str, Any]]) -> dict[str, tuple[Rule, ...]]:
    """ClusterRole rules, with an aggregated role's rules the union of the roles its
    ``aggregationRule.clusterRoleSelectors`` match (upstream's aggregation controller writes
    them into the object; here they are resolved when the index is built)."""
    out = {o["metadata"]["name"]: _rules(o) for o in objs}
    for o in objs:
        rule = o.get("aggregationRule")
        selectors = dicts(rule.get("clusterRoleSelectors")) if isinstance(rule, dict) else ()
        if not selectors:
            continue
        picked = [p for p in (_selector(s) for s in selectors) if p is not None]
        gathered = list(out[o["metadata"]["name"]])
        for other in objs:
            labels = other["metadata"].get("labels") or {}
            if other is not o and any(s.matches(labels) for s in picked):
                gathered += [r for r in out[other["metadata"]["name"]] if r not in gathered]
        out[o["metadata"]["name"]] = tuple(gathered)
    return out


def _selector(sel: Mapping[str, Any]) -> LabelSelector | None:
    """A clusterRoleSelector; None (matches nothing) when it does not parse."""
    labels = sel.get("matchLabels")
    terms = [f"{k}={v}" for k, v in (labels.items() if isinstance(labels, dict) else ())]
    for e in dicts(sel.get("matchExpressions")):
        op, key, values = e.get("operator", ""), e.get("key", ""), strings(e.get("values"))
        terms.append(
            {
                "In": f"{key} in ({','.join(values)})",
                "NotIn": f"{key} notin ({','.join(values)})",
                "Exists": key,
                "DoesNotExist": f"!{key}",
            }.get(op, key)
        )
    try:
        return LabelSelector.parse(",".join(terms))
    except BadRequest:
        return None


class Authorizer:
    """``always-allow`` (simcluster's historical default) or ``rbac`` (Node,RBAC)."""

    def __init__(self, store: Store, mode: str = "always-allow") -> None:
        if mode not in AUTHORIZATION_MODES:
            raise SimclusterError(
                f"unknown authorization mode {mode!r} ({', '.join(AUTHORIZATION_MODES)})"
            )
        self.mode = mode
        self.store = store
        self._index: _Index | None = None
        self._users: dict[User, _UserRules] = {}
        self._decisions: dict[Attributes, Decision] = {}
        store.add_listener(self._on_event)

    @property
    def enforcing(self) -> bool:
        return self.mode == "rbac"

    def _on_event(self, event: Event) -> None:
        if event.key in _KEYS:
            self._index = None
            self._users.clear()
            self._decisions.clear()

    def authorize(self, a: Attributes) -> Decision:
        if not self.enforcing:
            return Decision(True)
        cached = self._decisions.get(a)
        if cached is not None:
            return cached
        decision = self._decide(a)
        if len(self._decisions) >= _DECISION_CACHE_MAX:
            self._decisions.clear()
        self._decisions[a] = decision
        return decision

    def check(self, a: Attributes) -> None:
        """Raise upstream's 403 Forbidden unless ``a`` is allowed."""
        decision = self.authorize(a)
        if not decision.allowed:
            raise forbidden(a, decision.reason)

    def check_create_by_apply(self, a: Attributes, exists: bool) -> None:
        """A server-side apply that would create the object also needs ``create`` on it, as
        upstream's ``withAuthorization`` around create-on-update; its 403 carries only the
        authorizer's reason (often empty), exactly as upstream words it."""
        if exists or not self.enforcing:
            return
        decision = self.authorize(Attributes(a.user, "create", *a[2:]))
        if not decision.allowed:
            qualified = f"{a.resource}.{a.group}" if a.group else a.resource
            details: dict[str, Any] = {"kind": a.resource, "name": a.name}
            if a.group:
                details["group"] = a.group
            raise Forbidden(
                f'{qualified} "{a.name}" is forbidden: {decision.reason}', details=details
            )

    def _decide(self, a: Attributes) -> Decision:
        if "system:masters" in a.user.groups:
            return Decision(True)
        if node_allows(a):
            return Decision(True, "allowed by the Node authorizer")
        errors: list[str] = []
        for grant in self._grants(a):
            if grant.error:
                errors.append(grant.error)
            elif any(r.allows(a) for r in grant.rules):
                return Decision(True, f"RBAC: allowed by {grant.source}")
        if not errors:
            return Decision(False)
        unique = list(dict.fromkeys(errors))
        text = unique[0] if len(unique) == 1 else f"[{', '.join(unique)}]"
        return Decision(False, f"RBAC: {text}")

    def _grants(self, a: Attributes) -> Iterator[_Grant]:
        rules = self.user_rules(a.user)
        yield from rules.cluster
        if a.namespace:
            yield from rules.by_namespace.get(a.namespace, ())

    def user_rules(self, user: User) -> _UserRules:
        got = self._users.get(user)
        if got is None:
            if self._index is None:
                self._index = _Index.build(self.store)
            got = self._users[user] = self._index.for_user(user)
        return got

    def rules_in(self, user: User, namespace: str) -> tuple[list[Rule], bool]:
        """What ``user`` may do in ``namespace`` (SelfSubjectRulesReview): the rules and
        whether the list is incomplete (a bound role is missing)."""
        if not self.enforcing or "system:masters" in user.groups:
            everything = Rule(frozenset({"*"}), frozenset({"*"}), frozenset({"*"}))
            return [everything, Rule(frozenset({"*"}), urls=("*",))], False
        rules = self.user_rules(user)
        grants: Iterable[_Grant] = (*rules.cluster, *rules.by_namespace.get(namespace, ()))
        out: list[Rule] = []
        incomplete = False
        for g in grants:
            incomplete = incomplete or bool(g.error)
            out += [r for r in g.rules if r not in out]
        return out, incomplete


def forbidden(a: Attributes, reason: str = "") -> Forbidden:
    """upstream's ``responsewriters.Forbidden``: the message kubectl prints on a 403."""
    who = f'User "{a.user.name}"'
    if not a.resource_request:
        text = f'{who} cannot {a.verb} path "{a.path}"'
        return Forbidden(f"forbidden: {text}" + (f": {reason}" if reason else ""), details={})
    resource = f"{a.resource}/{a.subresource}" if a.subresource else a.resource
    where = f'in the namespace "{a.namespace}"' if a.namespace else "at the cluster scope"
    text = f'{who} cannot {a.verb} resource "{resource}" in API group "{a.group}" {where}'
    if reason:
        text += f": {reason}"
    qualified = f"{a.resource}.{a.group}" if a.group else a.resource
    subject = f'{qualified} "{a.name}"' if a.name else qualified
    details: dict[str, Any] = {"kind": a.resource}
    if a.group:
        details["group"] = a.group
    if a.name:
        details["name"] = a.name
    return Forbidden(f"{subject} is forbidden: {text}", details=details)
