"""NetworkPolicy semantics, small: whether one connection is allowed by a set of policies.

Why our own evaluator: simcluster enforces no network policy and no CNI runs in the tests,
yet the manifests' policies decide whether pre-placement works at all (issue 24: the
controller's port was open only to scrapers and nothing noticed). This module implements
what ``networking.k8s.io/v1`` specifies for the features the manifests use, so a test can
hold the rendered policies to the connections the code makes (tests/support/flows.py):

- a policy applies to the pods its ``podSelector`` selects in its own namespace; a pod
  selected by at least one policy of a direction is isolated in that direction and gets
  only what some rule of those policies allows (the union: policies are additive);
- ``policyTypes`` absent means Ingress, plus Egress when the policy has an ``egress``
  section;
- a rule's peers: ``podSelector`` alone (pods of the policy's namespace),
  ``namespaceSelector`` alone (every pod of the matching namespaces), both (those pods of
  those namespaces), ``ipBlock`` (addresses in ``cidr`` outside ``except``, pod or not);
  no peers list: any source or destination; an empty list of rules: nothing;
- ports: a number or a named port (resolved against the destination pod's container
  ports), ``endPort`` ranges, protocol TCP when absent; no ports: every port;
- label selectors: ``matchLabels`` and ``matchExpressions`` (In, NotIn, Exists,
  DoesNotExist); an empty selector selects everything;
- a namespace's labels include ``kubernetes.io/metadata.name`` (set by the API server).

A connection is allowed when the source's egress and the destination's ingress both allow
it. Endpoints outside the pod network (a trainer, the API server) are given as addresses
only: no policy selects them, and only ``ipBlock`` peers match them.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Endpoint", "allowed", "selects"]

Obj = dict[str, Any]


@dataclass(frozen=True)
class Endpoint:
    """One end of a connection: a pod (``namespace`` set) or an address outside the pod
    network (``namespace`` empty)."""

    name: str
    ip: str
    namespace: str = ""
    labels: Mapping[str, str] = field(default_factory=dict)
    namespace_labels: Mapping[str, str] = field(default_factory=dict)
    #: Named container ports of the pod, name -> (port, protocol).
    ports: Mapping[str, tuple[int, str]] = field(default_factory=dict)

    @property
    def is_pod(self) -> bool:
        return bool(self.namespace)

    def ns_labels(self) -> dict[str, str]:
        return {**self.namespace_labels, "kubernetes.io/metadata.name": self.namespace}


def selects(selector: Mapping[str, Any] | None, labels: Mapping[str, str]) -> bool:
    """A LabelSelector matched against ``labels`` (an empty selector matches all)."""
    selector = selector or {}
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expr in selector.get("matchExpressions") or ():
        key, op, values = expr["key"], expr["operator"], expr.get("values") or ()
        if op == "In" and labels.get(key) not in values:
            return False
        if op == "NotIn" and key in labels and labels[key] in values:
            return False
        if op == "Exists" and key not in labels:
            return False
        if op == "DoesNotExist" and key in labels:
            return False
        if op not in ("In", "NotIn", "Exists", "DoesNotExist"):
            raise ValueError(f"unknown selector operator {op!r}")
    return True


def _types(policy: Obj) -> set[str]:
    spec = policy["spec"]
    if "policyTypes" in spec:
        return set(spec["policyTypes"])
    return {"Ingress"} | ({"Egress"} if "egress" in spec else set())


def _peer_matches(peer: Obj, policy_ns: str, other: Endpoint) -> bool:
    if "ipBlock" in peer:
        block = peer["ipBlock"]
        ip = ipaddress.ip_address(other.ip)
        if ip not in ipaddress.ip_network(block["cidr"]):
            return False
        return not any(ip in ipaddress.ip_network(e) for e in block.get("except") or ())
    if not other.is_pod:
        return False
    if "namespaceSelector" in peer:
        if not selects(peer["namespaceSelector"], other.ns_labels()):
            return False
    elif other.namespace != policy_ns:
        return False
    return selects(peer.get("podSelector"), other.labels)


def _port_matches(entry: Obj, port: int, protocol: str, dst: Endpoint) -> bool:
    if entry.get("protocol", "TCP") != protocol:
        return False
    if "port" not in entry:
        return True
    want = entry["port"]
    if isinstance(want, str):  # a named port: the destination pod's
        named = dst.ports.get(want)
        return named is not None and named == (port, protocol)
    return int(want) <= port <= int(entry.get("endPort") or want)


def _rule_allows(
    rule: Obj, peers_key: str, policy_ns: str, peer: Endpoint, dst: Endpoint, port: int, proto: str
) -> bool:
    peers = rule.get(peers_key)
    if peers and not any(_peer_matches(p, policy_ns, peer) for p in peers):
        return False
    ports = rule.get("ports")
    return not ports or any(_port_matches(e, port, proto, dst) for e in ports)


def _direction_allows(
    policies: Iterable[Obj], kind: str, subject: Endpoint, peer: Endpoint, dst: Endpoint,
    port: int, proto: str,
) -> bool:  # fmt: skip
    if not subject.is_pod:
        return True  # outside the pod network: no NetworkPolicy applies
    key, peers_key = ("ingress", "from") if kind == "Ingress" else ("egress", "to")
    isolating = [
        p
        for p in policies
        if p["metadata"].get("namespace") == subject.namespace
        and kind in _types(p)
        and selects(p["spec"].get("podSelector"), subject.labels)
    ]
    if not isolating:
        return True
    return any(
        _rule_allows(rule, peers_key, p["metadata"]["namespace"], peer, dst, port, proto)
        for p in isolating
        for rule in p["spec"].get(key) or ()
    )


def allowed(
    policies: Iterable[Obj], src: Endpoint, dst: Endpoint, port: int, protocol: str = "TCP"
) -> bool:
    """Whether ``src`` may open a connection to ``dst``'s ``port`` under ``policies``."""
    policies = [p for p in policies if p.get("kind") == "NetworkPolicy"]
    return _direction_allows(
        policies, "Egress", src, dst, dst, port, protocol
    ) and _direction_allows(policies, "Ingress", dst, src, dst, port, protocol)
