"""Least privilege, proven both ways: every Kubernetes API call the code makes is listed
below with the line that makes it, every listed call is allowed by the RBAC the manifests
render, and every verb of every rule is needed by some listed call.

The list is derived from the code, and kept so: a scan of controller/, facade/ and
daemon/node/ finds each call site (``client.<verb>(``, ``Informer(``) and fails on one that
no entry claims, so a new API call cannot land without its rule. The operator guide shows
the same list (docs/operator-guide.md, "Permissions"); a test keeps the two equal.

The authorizer here is deliberately small — RBAC's rule matching for the verbs, groups,
resources and names the manifests use (no wildcards: a wildcard is itself a failure) —
because simcluster's full one (rbac14) is exercised end to end by the simcluster overlay.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import pytest

from tests.support.manifests import ROOT, Rendered, render

SYSTEM = "sandman-system"
NODES = "sandman-nodes"  # the agents' Leases (kube/preparation_contract.py)
TENANT = "sandman-team-a"  # the tenant-example overlay's namespace
ACCOUNTS = {
    "controller": "sandman-controller",
    "facade": "sandman-facade",
    "node-agent": "sandman-node-agent",
    "pools": "sandman-pools",
}


@dataclass(frozen=True)
class Call:
    """One API call: who, what, where (``*``: all namespaces or cluster-scoped), the file
    and a text of the line that makes it, and why."""

    account: str
    verbs: tuple[str, ...]
    group: str
    resource: str
    namespace: str
    source: str
    needle: str
    why: str
    name: str = ""

    def row(self) -> str:
        group = self.group or "core"
        where = {"*": "all namespaces", TENANT: "tenant namespaces"}.get(
            self.namespace, self.namespace
        )
        named = f" `{self.name}`" if self.name else ""
        return (
            f"| {self.account} | {', '.join(self.verbs)} | `{self.resource}`{named} ({group}) "
            f"| {where} | `{self.source}` | {self.why} |"
        )


C, F, A, P = "controller", "facade", "node-agent", "pools"
LW = ("list", "watch")
CALLS = (
    Call(C, LW, "", "pods", "*", "controller/view.py", "self.bound = Informer(",
         "bound pods of every owner: node capacity"),
    Call(C, LW, "", "pods", "*", "controller/view.py", "self.pending = Informer(",
         "pending sandboxes (schedulerName sandman)"),
    Call(C, LW, "", "nodes", "*", "controller/view.py", "self.nodes = Informer(",
         "node capacity, conditions, taints"),
    Call(C, LW, "coordination.k8s.io", "leases", "*", "controller/view.py",
         "self.owner_leases = Informer(", "trainers' owner Leases"),
    Call(C, LW, "coordination.k8s.io", "leases", "*", "controller/view.py",
         "self.agent_leases = Informer(", "node agents' ready images"),
    Call(C, LW, "sandman.io", "imagepreparations", "*", "controller/image_preparer.py",
         "self.requests = Informer(", "image preparation requests"),
    Call(C, ("create",), "authentication.k8s.io", "tokenreviews", "*",
         "controller/placement_auth.py", "self.client.create(TOKEN_REVIEWS",
         "whose token a placement call carries"),
    Call(C, LW, "sandman.io", "sandboxclaims", "*", "controller/claims.py",
         "self.informer = Informer(", "claimed pool pods: never handed out twice"),
    Call(C, ("list",), "sandman.io", "sandboxclaims", "*", "controller/claims.py",
         "self.reader.list(SANDBOX_CLAIMS", "a new leader reads every claim before serving"),
    Call(C, ("create",), "sandman.io", "sandboxclaims", TENANT, "controller/claims.py",
         "await self.client.request(", "one SandboxClaim per claimed batch"),
    Call(C, ("get",), "sandman.io", "sandboxclaims", TENANT, "controller/claims.py",
         "self.client.get(SANDBOX_CLAIMS", "a retried claim's stored pods"),
    Call(C, ("delete",), "sandman.io", "sandboxclaims", TENANT, "controller/collector.py",
         "self.client.delete(SANDBOX_CLAIMS", "a claim none of whose pods is left"),
    Call(C, ("create",), "", "pods/binding", TENANT, "controller/binder.py",
         "self.client.bind(", "bind a planned sandbox"),
    Call(C, ("delete",), "", "pods", TENANT, "controller/collector.py",
         "await self.client.delete(PODS", "collect expired, idle, terminal, stuck sandboxes"),
    Call(C, ("delete",), "", "pods", TENANT, "controller/replace.py",
         "await self.client.delete(PODS", "remove a rejected original"),
    Call(C, ("create",), "", "pods", TENANT, "controller/replace.py",
         "await self.client.create(PODS", "replacement of a rejected sandbox"),
    Call(C, ("deletecollection",), "", "pods", TENANT, "controller/owners.py",
         "client.delete_collection(PODS", "an expired owner's sandboxes"),
    Call(C, ("create",), "", "events", TENANT, "controller/binder.py",
         "self.client.create(EVENTS", "FailedScheduling"),
    Call(C, ("create",), "", "events", TENANT, "controller/collector.py",
         "self.client.create(EVENTS", "SandboxDeleted"),
    Call(C, ("patch",), "sandman.io", "imagepreparations/status", TENANT,
         "controller/image_preparer.py", 'self.client.request("PATCH", path',
         "a trainer's request's progress"),
    Call(C, ("patch",), "sandman.io", "imagepreparations/status", SYSTEM,
         "controller/image_preparer.py", 'self.client.request("PATCH", path',
         "an operator's standing request's progress"),
    Call(C, ("deletecollection",), "sandman.io", "imagepreparations", TENANT,
         "controller/owners.py", "client.delete_collection(IMAGE_PREPARATIONS",
         "an expired owner's image announcements"),
    Call(C, LW, "sandman.io", "imagepreparations", "*", "controller/pools.py",
         "self.announcements = Informer(", "announcements with sandboxes: the pools to fill"),
    Call(C, ("impersonate",), "", "serviceaccounts", SYSTEM, "controller/pools.py",
         "self.client.impersonating(settings.identity)",
         "the pool pod writes sent as sandman-pools (their own APF level)", name="sandman-pools"),
    Call(P, ("create",), "", "pods", TENANT, "controller/pools.py",
         'self.writer.request("POST", PODS.path', "a pool pod, pre-placed (nodeName set)"),
    Call(P, ("delete",), "", "pods", TENANT, "controller/pools.py",
         "await self.writer.delete(PODS", "an unclaimed pool pod: its announcement ended, "
         "it failed, or its node is lost"),
    Call(C, ("patch",), "sandman.io", "imagepreparations/status", TENANT, "controller/pools.py",
         'self.client.request("PATCH", path', "an announcement's pool counts"),
    Call(C, ("patch",), "sandman.io", "imagepreparations/status", TENANT,
         "controller/standing.py", 'await client.request("PATCH", path',
         "a standing pool's next slot, before its creates"),
    Call(C, ("create",), "coordination.k8s.io", "leases", SYSTEM, "controller/leader.py",
         "self.client.create(LEASES", "the election Lease, first time"),
    Call(C, ("get",), "coordination.k8s.io", "leases", SYSTEM, "controller/leader.py",
         "self.client.get(LEASES, s.name", "read the election Lease", name="sandman-controller"),
    Call(C, ("update",), "coordination.k8s.io", "leases", SYSTEM, "controller/leader.py",
         "self.client.replace(LEASES", "acquire and renew leadership", name="sandman-controller"),
    Call(C, ("patch",), "coordination.k8s.io", "leases", NODES, "controller/image_preparer.py",
         "self.client.patch(LEASES", "a node's preparation plan on its agent's Lease"),
    Call(F, LW, "", "nodes", "*", "facade/app.py", "nodes = Informer(self.client, NODES",
         "node loss in sandbox states"),
    Call(F, LW, "", "pods", TENANT, "facade/app.py", "pods = Informer(",
         "the sandbox watch cache"),
    Call(F, LW, "", "events", TENANT, "facade/app.py", "events = Informer(",
         "the controller's reasons for a sandbox"),
    Call(F, LW, "sandman.io", "sandboxclaims", TENANT, "facade/app.py", "claims = Informer(",
         "whose the claimed pool sandboxes are"),
    Call(F, ("delete",), "", "pods", TENANT, "facade/pooled.py", "self.client.delete(PODS",
         "a claimed pool pod whose daemon never took its claim"),
    Call(F, ("create",), "", "pods", TENANT, "facade/writer.py",
         'self.client.request(', "create a sandbox, on its placement's node or unbound"),
    Call(F, ("get",), "", "pods", TENANT, "facade/writer.py", "self.client.get(PODS",
         "read-your-write after a create"),
    Call(F, ("delete",), "", "pods", TENANT, "facade/service.py", "self.client.delete(PODS",
         "release a sandbox"),
    Call(F, ("deletecollection",), "", "pods", TENANT, "facade/service.py",
         "self.client.delete_collection(PODS", "release an owner's sandboxes"),
    Call(F, ("patch",), "coordination.k8s.io", "leases", TENANT, "facade/leases.py",
         "self.client.patch(LEASES", "renew an owner Lease"),
    Call(F, ("create",), "coordination.k8s.io", "leases", TENANT, "facade/leases.py",
         "self.client.create(LEASES", "first renewal of an owner Lease"),
    Call(F, ("delete",), "coordination.k8s.io", "leases", TENANT, "facade/leases.py",
         "self.client.delete(LEASES", "release an owner"),
    Call(F, ("get",), "coordination.k8s.io", "leases", SYSTEM, "kube/placement.py",
         "self.api.get(LEASES, s.lease_name", "the leader's placement URL on its election Lease",
         name="sandman-controller"),
    Call(F, ("create",), "sandman.io", "imagepreparations", TENANT, "facade/announcements.py",
         "self.client.create(IMAGE_PREPARATIONS", "POST /v1/prepare"),
    Call(F, ("get",), "sandman.io", "imagepreparations", TENANT, "facade/announcements.py",
         "self.client.get(IMAGE_PREPARATIONS", "GET /v1/prepare/{id}"),
    Call(F, ("list",), "sandman.io", "imagepreparations", TENANT, "facade/announcements.py",
         "self.client.list(", "a tenant's live announcements against its caps"),
    Call(F, ("deletecollection",), "sandman.io", "imagepreparations", TENANT,
         "facade/announcements.py", "self.client.delete_collection(",
         "an owner's announcements on release"),
    Call(F, ("create",), "sandman.io", "imagepreparations", TENANT, "facade/standing.py",
         "self.client.create(IMAGE_PREPARATIONS", "a configured standing pool's object"),
    Call(F, ("get",), "sandman.io", "imagepreparations", TENANT, "facade/standing.py",
         "self.client.get(IMAGE_PREPARATIONS", "a standing pool's object, to compare"),
    Call(F, ("update",), "sandman.io", "imagepreparations", TENANT, "facade/standing.py",
         "self.client.replace(IMAGE_PREPARATIONS", "a standing pool whose configuration changed"),
    Call(F, ("list",), "sandman.io", "imagepreparations", TENANT, "facade/standing.py",
         "self.client.list(", "the namespace's standing pools, against the configuration"),
    Call(F, ("delete",), "sandman.io", "imagepreparations", TENANT, "facade/standing.py",
         "self.client.delete(", "a standing pool no longer configured"),
    Call(A, LW, "coordination.k8s.io", "leases", NODES, "daemon/node/agent.py",
         "self.lease = Informer(", "its own Lease: the controller's plan"),
    Call(A, ("patch",), "coordination.k8s.io", "leases", NODES, "daemon/node/lease.py",
         "self.client.patch(LEASES", "renewals and ready sets"),
    Call(A, ("create",), "coordination.k8s.io", "leases", NODES, "daemon/node/lease.py",
         "self.client.create(LEASES", "its Lease, first time"),
    Call(A, ("create",), "", "events", "default", "daemon/node/agent.py",
         "self.client.create(EVENTS", "ImagePrepareFailed, NodeNotHardened on its Node"),
)  # fmt: skip

CALL_SITE = re.compile(
    r"\bclient\.(get|list|create|patch|replace|delete|delete_collection|bind|request|watch)\("
    r"|\bInformer\("
)
SCANNED = ("controller", "facade", "daemon/node")


@dataclass(frozen=True)
class Grant:
    """One rule as granted to an account: through a ClusterRoleBinding (``*``) or a
    RoleBinding in a namespace."""

    account: str
    namespace: str
    where: str  # the role's kind/name, for messages
    rule: tuple[tuple[str, tuple[str, ...]], ...]

    def get(self, key: str) -> tuple[str, ...]:
        return dict(self.rule).get(key, ())

    def allows(self, call: Call, verb: str) -> bool:
        if self.namespace not in ("*", call.namespace):
            return False
        names = self.get("resourceNames")
        return (
            call.group in self.get("apiGroups")
            and call.resource in self.get("resources")
            and verb in self.get("verbs")
            and (not names or call.name in names)
        )


def grants(*rendered: Rendered) -> list[Grant]:
    objects = [o for r in rendered for o in r.objects]
    roles = {
        (o["kind"], o["metadata"].get("namespace", ""), o["metadata"]["name"]): o
        for o in objects
        if o["kind"] in ("Role", "ClusterRole")
    }
    accounts = {v: k for k, v in ACCOUNTS.items()}
    out: list[Grant] = []
    for b in objects:
        if b["kind"] not in ("RoleBinding", "ClusterRoleBinding"):
            continue
        namespace = b["metadata"].get("namespace", "*") if b["kind"] == "RoleBinding" else "*"
        ref = b["roleRef"]
        role_ns = namespace if ref["kind"] == "Role" else ""
        role = roles[(ref["kind"], role_ns, ref["name"])]
        for s in b["subjects"]:
            assert s["kind"] == "ServiceAccount" and s["namespace"] == SYSTEM, s
            for rule in role["rules"]:
                for key, values in rule.items():
                    assert "*" not in values, f"{ref['name']}: wildcard in {key}"
                frozen = tuple(sorted((k, tuple(v)) for k, v in rule.items()))
                where = f"{ref['kind']} {ref['name']}"
                out.append(Grant(accounts[s["name"]], namespace, where, frozen))
    return out


@pytest.fixture(scope="module")
def granted() -> list[Grant]:
    return grants(render("production"), render("tenant-example"))


def test_every_listed_call_is_still_made_where_it_says() -> None:
    for call in CALLS:
        text = (ROOT / call.source).read_text()
        assert call.needle in text, f"{call.source} no longer has {call.needle!r}"


def test_every_api_call_in_the_code_is_listed() -> None:
    claimed: dict[str, set[str]] = {}
    for call in CALLS:
        claimed.setdefault(call.source, set()).add(call.needle)
    unlisted = []
    for part in SCANNED:
        for path in sorted((ROOT / part).rglob("*.py")):
            source = str(path.relative_to(ROOT))
            for number, line in enumerate(path.read_text().splitlines(), 1):
                code = CALL_SITE.search(line) and not line.lstrip().startswith("#")
                if code and not any(n in line for n in claimed.get(source, ())):
                    unlisted.append(f"{source}:{number}: {line.strip()}")
    assert not unlisted, "API calls with no entry in CALLS (and no RBAC reason):\n" + "\n".join(
        unlisted
    )


def test_every_listed_call_is_allowed(granted: list[Grant]) -> None:
    denied = [
        f"{c.account} {verb} {c.resource} in {c.namespace} ({c.source})"
        for c in CALLS
        for verb in c.verbs
        if not any(g.account == c.account and g.allows(c, verb) for g in granted)
    ]
    assert not denied, denied


def test_every_rule_is_needed_by_a_listed_call(granted: list[Grant]) -> None:
    """Each (verb, resource) of each granted rule is used by some call in that rule's scope:
    a cluster-wide grant by a cluster-wide call, a namespace's by a call there."""
    unused = []
    for g in granted:
        for verb in g.get("verbs"):
            for resource in g.get("resources"):
                used = any(
                    c.account == g.account
                    and c.resource == resource
                    and verb in c.verbs
                    and c.namespace == g.namespace
                    and g.allows(c, verb)
                    for c in CALLS
                )
                if not used:
                    unused.append(f"{g.account}: {g.where} in {g.namespace}: {verb} {resource}")
    assert not unused, unused


def test_no_account_can_read_secrets_or_escalate(granted: list[Grant]) -> None:
    """No secrets, no RBAC writes, no escalate or bind; ``impersonate`` only of a named
    ServiceAccount of Sandman's that can do nothing its impersonator cannot (the controller
    sending its pool writes as sandman-pools, for their own APF level): a narrower identity,
    never a wider one."""
    names = {v: k for k, v in ACCOUNTS.items()}
    for g in granted:
        resources = set(g.get("resources"))
        assert not resources & {"secrets", "roles", "rolebindings", "clusterroles", "pods/exec"}
        assert not set(g.get("verbs")) & {"escalate", "bind"}
        if "impersonate" not in g.get("verbs"):
            continue
        assert set(g.get("verbs")) == {"impersonate"} and resources == {"serviceaccounts"}, g
        assert g.get("resourceNames") and g.namespace == SYSTEM, g
        for name in g.get("resourceNames"):
            assert name in names, f"{g.account} impersonates {name}, not one of Sandman's"
            for call in (c for c in CALLS if c.account == names[name]):
                for verb in call.verbs:
                    assert any(
                        own.account == g.account and own.allows(call, verb) for own in granted
                    ), f"{names[name]} may {verb} {call.resource}, which {g.account} may not"


def test_the_operator_guide_lists_the_same_calls() -> None:
    guide = (ROOT / "docs" / "operator-guide.md").read_text()
    table = guide.split("<!-- rbac-calls:begin -->", 1)[1].split("<!-- rbac-calls:end -->", 1)[0]
    rows = [line for line in table.splitlines() if line.startswith("| ") and "---" not in line]
    hint = "regenerate it: python -m tests.manifests.test_rbac"
    assert rows[1:] == [c.row() for c in CALLS], hint


if __name__ == "__main__":  # the guide's table: python -m tests.manifests.test_rbac
    print("| account | verbs | resource | where | code | why |")
    print("|---|---|---|---|---|---|")
    for call in CALLS:
        print(call.row())
