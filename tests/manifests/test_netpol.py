"""The NetworkPolicy evaluator (tests/support/netpol.py) against the specification's cases:
test_network trusts its verdicts, so each rule it implements is pinned here, including the
ones that are easy to get wrong (a peer's two selectors are one AND-ed peer, two peers are
OR-ed; ``policyTypes`` defaults; a named port is the destination's), and the additivity of
policies as a property."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from tests.support.netpol import Endpoint, allowed, selects

A = Endpoint("a", "10.0.0.1", "ns-a", {"app": "a"}, {"team": "x"})
B = Endpoint("b", "10.0.0.2", "ns-b", {"app": "b"}, {"team": "y"}, {"http": (8080, "TCP")})
OUTSIDE = Endpoint("outside", "203.0.113.9")


def policy(namespace: str, selector: dict[str, Any], **spec: Any) -> dict[str, Any]:
    return {
        "kind": "NetworkPolicy",
        "metadata": {"name": "p", "namespace": namespace},
        "spec": {"podSelector": selector, **spec},
    }


DENY_B_IN = policy("ns-b", {}, policyTypes=["Ingress"])


def test_no_policy_allows_everything_and_selection_isolates() -> None:
    assert allowed([], A, B, 1)
    assert not allowed([DENY_B_IN], A, B, 8080)
    assert allowed([DENY_B_IN], B, A, 1), "isolated for ingress only"
    other = policy("ns-b", {"matchLabels": {"app": "zzz"}}, policyTypes=["Ingress"])
    assert allowed([other], A, B, 8080), "a policy selecting other pods isolates nothing"


def test_policy_types_default_to_ingress_plus_egress_when_there_is_an_egress_section() -> None:
    ingress_only = policy("ns-a", {})  # no policyTypes, no egress: Ingress
    assert allowed([ingress_only], A, B, 1)
    assert not allowed([ingress_only], B, A, 1)
    with_egress = policy("ns-a", {}, egress=[])
    assert not allowed([with_egress], A, B, 1)


def test_one_peer_with_both_selectors_is_an_and_two_peers_an_or() -> None:
    both = [{"namespaceSelector": {"matchLabels": {"team": "x"}},
             "podSelector": {"matchLabels": {"app": "nope"}}}]  # fmt: skip
    either = [{"namespaceSelector": {"matchLabels": {"team": "x"}}},
              {"podSelector": {"matchLabels": {"app": "nope"}}}]  # fmt: skip
    assert not allowed([policy("ns-b", {}, ingress=[{"from": both}])], A, B, 1)
    assert allowed([policy("ns-b", {}, ingress=[{"from": either}])], A, B, 1)


def test_a_pod_selector_alone_means_the_policy_s_own_namespace() -> None:
    peers = [{"podSelector": {"matchLabels": {"app": "a"}}}]
    assert not allowed([policy("ns-b", {}, ingress=[{"from": peers}])], A, B, 1)
    same_ns = Endpoint("a2", "10.0.0.3", "ns-b", {"app": "a"})
    assert allowed([policy("ns-b", {}, ingress=[{"from": peers}])], same_ns, B, 1)


def test_ip_blocks_with_except_and_outside_addresses() -> None:
    rule = {"to": [{"ipBlock": {"cidr": "0.0.0.0/0", "except": ["10.0.0.0/8"]}}]}
    egress = policy("ns-a", {}, policyTypes=["Egress"], egress=[rule])
    assert allowed([egress], A, OUTSIDE, 443)
    assert not allowed([egress], A, B, 443), "a pod's address is excepted"
    assert allowed([DENY_B_IN], OUTSIDE, A, 1), "nothing selects an outside address"
    assert not allowed([DENY_B_IN], OUTSIDE, B, 1)


def test_ports_numbers_ranges_protocols_and_named_ports() -> None:
    def only(*ports: dict[str, Any]) -> list[dict[str, Any]]:
        return [policy("ns-b", {}, ingress=[{"ports": list(ports)}])]

    assert allowed(only({"port": 8080}), A, B, 8080)
    assert not allowed(only({"port": 8080}), A, B, 8081)
    assert not allowed(only({"port": 8080}), A, B, 8080, "UDP"), "TCP when absent"
    assert allowed(only({"port": 8000, "endPort": 8100}), A, B, 8080)
    assert allowed(only({"port": "http"}), A, B, 8080), "B's named port"
    assert not allowed(only({"port": "http"}), A, B, 8081)
    assert not allowed(only({"port": "metrics"}), A, B, 8080), "a name B does not have"
    assert allowed(only({"protocol": "UDP"}), A, B, 53, "UDP"), "any port of a protocol"


def test_label_selector_operators() -> None:
    labels = {"k": "v", "c": "build"}
    assert selects({}, labels)
    assert selects({"matchExpressions": [{"key": "k", "operator": "Exists"}]}, labels)
    assert not selects({"matchExpressions": [{"key": "z", "operator": "Exists"}]}, labels)
    assert selects({"matchExpressions": [{"key": "z", "operator": "DoesNotExist"}]}, labels)
    expr = {"key": "c", "operator": "In", "values": ["build", "x"]}
    assert selects({"matchExpressions": [expr]}, labels)
    assert not selects({"matchExpressions": [{**expr, "operator": "NotIn"}]}, labels)
    assert selects({"matchExpressions": [{"key": "z", "operator": "NotIn", "values": ["v"]}]},
                   labels)  # fmt: skip


PORTS = st.integers(1, 65535)
RULES = st.lists(
    st.fixed_dictionaries({}, optional={"ports": st.lists(
        st.fixed_dictionaries({"port": PORTS}), min_size=1, max_size=3)}),
    max_size=3,
)  # fmt: skip


@given(first=RULES, second=RULES, port=PORTS)
def test_policies_are_additive_for_an_isolated_pod(
    first: list[dict[str, Any]], second: list[dict[str, Any]], port: int
) -> None:
    """Adding a policy to an already isolated pod never denies what was allowed, and what
    the union allows, one of the policies allows."""
    p1 = policy("ns-b", {}, ingress=first)
    p2 = policy("ns-b", {}, ingress=second)
    alone = allowed([p1], A, B, port)
    union = allowed([p1, p2], A, B, port)
    assert union >= alone
    assert union == (alone or allowed([p2], A, B, port))
