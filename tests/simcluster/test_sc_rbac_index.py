"""The authorizer's index and memo agree with a naive scan of every binding, also after
bindings are deleted (the memo must not outlive the RBAC objects it was computed from)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from simcluster.apiserver.auth import User
from simcluster.apiserver.core import ApiCore
from simcluster.apiserver.dispatch import Dispatcher
from simcluster.apiserver.local import LocalApiError, LocalClient
from simcluster.apiserver.rbac import Attributes, Authorizer, Rule
from simcluster.apiserver.resources import Registry, ResourceType
from simcluster.apiserver.store import Store

NAMESPACES = ("a", "b")
USERS = (
    User("alice", ("devs",)),
    User("system:serviceaccount:a:sa", ("system:serviceaccounts", "system:serviceaccounts:a")),
    User("bob", ()),
)
GROUP = "rbac.authorization.k8s.io"
PLURALS = ("roles", "clusterroles", "rolebindings", "clusterrolebindings")
APF = "flowcontrol.apiserver.k8s.io"
#: (group, plural, the field a hostile value goes into)
HOSTILE_TARGETS = [
    (GROUP, "clusterroles", "rules"),
    (GROUP, "clusterroles", "aggregationRule"),
    (GROUP, "clusterrolebindings", "subjects"),
    (GROUP, "clusterrolebindings", "roleRef"),
    (APF, "flowschemas", "spec"),
    (APF, "prioritylevelconfigurations", "spec"),
]
KEYS = [
    "verbs", "apiGroups", "resources", "resourceNames", "nonResourceURLs", "kind", "name",
    "namespace", "subjects", "resourceRules", "nonResourceRules", "rules", "user", "group",
    "serviceAccount", "priorityLevelConfiguration", "matchingPrecedence", "type", "limited",
    "nominalConcurrencyShares", "limitResponse", "clusterRoleSelectors", "matchLabels",
    "matchExpressions", "operator", "values", "key", "clusterScope", "namespaces",
]  # fmt: skip

rules = st.fixed_dictionaries(
    {
        "apiGroups": st.lists(st.sampled_from(["", "apps", "*"]), min_size=1, max_size=2),
        "resources": st.lists(
            st.sampled_from(["pods", "pods/status", "*", "deployments", "*/status"]),
            min_size=1,
            max_size=2,
        ),
        "verbs": st.lists(st.sampled_from(["get", "list", "create", "*"]), min_size=1, max_size=2),
    },
    optional={"resourceNames": st.lists(st.sampled_from(["x", "y"]), min_size=1, max_size=1)},
)
subjects = st.sampled_from(
    [
        {"kind": "User", "name": "alice"},
        {"kind": "Group", "name": "devs"},
        {"kind": "ServiceAccount", "name": "sa", "namespace": "a"},
        {"kind": "ServiceAccount", "name": "sa"},  # namespace: the RoleBinding's
        {"kind": "Group", "name": "system:serviceaccounts"},
    ]
)
bindings = st.tuples(
    st.sampled_from([None, *NAMESPACES]),  # None: a ClusterRoleBinding
    st.sampled_from(["Role", "ClusterRole"]),
    st.integers(0, 2),  # which role
    st.lists(subjects, min_size=1, max_size=2),
)
attributes = st.builds(
    lambda user, verb, group, res, ns, name: Attributes(
        user, verb, True, group, "v1", res[0], res[1], ns, name
    ),
    st.sampled_from(USERS),
    st.sampled_from(["get", "list", "create", "delete"]),
    st.sampled_from(["", "apps"]),
    st.sampled_from([("pods", ""), ("pods", "status"), ("deployments", "status"), ("nodes", "")]),
    st.sampled_from(["", *NAMESPACES]),
    st.sampled_from(["", "x", "y"]),
)


def _naive(store: Store, a: Attributes) -> bool:
    """Every binding, every subject, every rule: no index, no memo."""

    def role_rules(kind: str, ns: str, name: str) -> list[Rule]:
        key = f"{GROUP}/{'roles' if kind == 'Role' else 'clusterroles'}"
        role = store.get(key, ns if kind == "Role" else "", name)
        return [Rule.of(r) for r in (role or {}).get("rules") or []]

    def applies(subject: dict[str, Any], binding_ns: str) -> bool:
        if subject["kind"] == "User":
            return bool(subject["name"] == a.user.name)
        if subject["kind"] == "Group":
            return subject["name"] in a.user.groups
        ns = subject.get("namespace") or binding_ns
        return a.user.name == f"system:serviceaccount:{ns}:{subject['name']}"

    for key in (f"{GROUP}/clusterrolebindings", f"{GROUP}/rolebindings"):
        for b in store.iter(key):
            ns = b["metadata"].get("namespace", "")
            if ns and ns != a.namespace:
                continue
            if not any(applies(s, ns) for s in b["subjects"]):
                continue
            ref = b["roleRef"]
            if any(r.allows(a) for r in role_rules(ref["kind"], ns, ref["name"])):
                return True
    return False


def _subject(s: dict[str, Any], namespace: str | None) -> dict[str, Any]:
    if s["kind"] != "ServiceAccount":
        return s | {"apiGroup": GROUP}
    if namespace is None:  # a ClusterRoleBinding's service account needs its namespace
        return {"namespace": "a"} | s | {"apiGroup": ""}
    return s | {"apiGroup": ""}


def _types(core: ApiCore) -> dict[str, ResourceType]:
    types = {}
    for group, plural in (("", "namespaces"), *((GROUP, p) for p in PLURALS)):
        rt = core.registry.get(group, "v1", plural)
        assert rt is not None
        types[plural] = rt
    return types


@settings(max_examples=30, deadline=None)
@given(
    st.lists(rules, min_size=1, max_size=3),
    st.lists(bindings, min_size=1, max_size=5),
    st.lists(attributes, min_size=1, max_size=8),
    st.data(),
)
def test_index_and_memo_agree_with_a_naive_scan(
    role_rules: list[dict[str, Any]],
    binding_specs: list[tuple[str | None, str, int, list[dict[str, Any]]]],
    probes: list[Attributes],
    data: st.DataObject,
) -> None:
    store = Store()
    core = ApiCore(Registry.builtin(), store)
    rt = _types(core)
    for ns in NAMESPACES:
        core.create(rt["namespaces"], "", {"metadata": {"name": ns}})
    authorizer = Authorizer(store, "rbac")
    for i, rule in enumerate(role_rules):
        core.create(
            rt["clusterroles"],
            "",
            {"metadata": {"name": f"r{i}"}, "rules": [rule]},
        )
        for ns in NAMESPACES:
            core.create(rt["roles"], ns, {"metadata": {"name": f"r{i}"}, "rules": [rule]})
    names = []
    for j, (where, kind, role, subs) in enumerate(binding_specs):
        if where is None and kind == "Role":
            kind = "ClusterRole"  # a ClusterRoleBinding can only name a ClusterRole
        body = {
            "metadata": {"name": f"b{j}"},
            "roleRef": {"apiGroup": GROUP, "kind": kind, "name": f"r{role % len(role_rules)}"},
            "subjects": [_subject(s, where) for s in subs],
        }
        plural = "clusterrolebindings" if where is None else "rolebindings"
        core.create(rt[plural], where or "", body)
        names.append((plural, where or "", f"b{j}"))
    for a in probes:
        assert authorizer.authorize(a).allowed == _naive(store, a), a
    plural, namespace, name = data.draw(st.sampled_from(names))
    core.delete(rt[plural], namespace, name, {})
    for a in probes:  # the same attributes again: memoised before, must follow the delete
        assert authorizer.authorize(a).allowed == _naive(store, a), a


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 5) | st.sampled_from(["", "*", "pods", "x"]),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from(KEYS), inner),
    max_leaves=12,
)


async def _status(call: Awaitable[Any]) -> int:
    try:
        await call
    except LocalApiError as e:
        return e.code
    return 200


@settings(max_examples=40, deadline=None)
@given(st.sampled_from(HOSTILE_TARGETS), json_values)
def test_hostile_rbac_and_apf_objects_never_break_the_server(
    target: tuple[str, str, str], value: Any
) -> None:
    """Whatever shape a stored role, binding or APF object has (validation checks names and
    required fields, not every type), writing it and every later request get a Status,
    never a 500."""
    group, plural, field = target

    async def scenario() -> list[int]:
        store = Store()
        core = ApiCore(Registry.builtin(), store)
        dispatcher = Dispatcher(core, authorizer=Authorizer(store, "rbac"))
        admin = LocalClient(dispatcher, User("admin", ("system:masters",)))
        sa = LocalClient(dispatcher, USERS[1])
        body: dict[str, Any] = {"metadata": {"name": "hostile"}, field: value}
        if plural.endswith("bindings"):
            body.setdefault("roleRef", {"apiGroup": GROUP, "kind": "ClusterRole", "name": "r"})
        create = admin.request("create", plural, group=group, version="v1", body=body)
        codes = [await _status(create)]
        codes.append(await _status(sa.request("list", "pods", namespace="a")))
        return codes

    assert 500 not in asyncio.run(scenario())
