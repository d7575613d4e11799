"""Table tests, one table per filter: verdict and kube-scheduler's reason string."""

from __future__ import annotations

import pytest

from scheduler import NodeInfo, PodShape, Requirement, Resources, SelectorTerm, Taint, Toleration
from scheduler.filters import (
    Capacity,
    max_pods,
    node_affinity,
    node_conditions,
    node_unschedulable,
    resources_fit,
    taint_toleration,
)
from scheduler.model import Code

SANDBOX = Resources(250, 512 * 2**20)


def node(**kw: object) -> NodeInfo:
    base: dict[str, object] = {
        "name": "n1",
        "allocatable": Resources(16000, 64 * 2**30),
        "max_pods": 110,
    }
    base.update(kw)
    return NodeInfo(**base)  # type: ignore[arg-type]


def shape(**kw: object) -> PodShape:
    return PodShape(requests=kw.pop("requests", SANDBOX), **kw)  # type: ignore[arg-type]


TOLERATE_ALL = (Toleration(operator="Exists"),)
TAINTED = "node(s) had untolerated taint {%s: %s}"
NOT_READY = TAINTED % ("node.kubernetes.io/not-ready", "")
UNREACHABLE = TAINTED % ("node.kubernetes.io/unreachable", "")
NOT_READY_NO_EXECUTE = Toleration("node.kubernetes.io/not-ready", "Exists", "", "NoExecute")
GPU_REASON = TAINTED % ("nvidia.com/gpu", "present")
GPUS = (("nvidia.com/gpu", 1),)


@pytest.mark.parametrize(
    ("cordoned", "tolerations", "ok"),
    [
        (False, (), True),
        (True, (), False),
        (True, (Toleration("node.kubernetes.io/unschedulable", "Exists", "", "NoSchedule"),), True),
        (True, TOLERATE_ALL, True),
        (True, (Toleration("node.kubernetes.io/unschedulable", "Exists", "", "NoExecute"),), False),
    ],
)
def test_node_unschedulable(cordoned: bool, tolerations: tuple[Toleration, ...], ok: bool) -> None:
    status = node_unschedulable(shape(tolerations=tolerations), node(unschedulable=cordoned))
    assert status.ok is ok
    if not ok:
        assert status.code is Code.UNRESOLVABLE
        assert status.reasons == ("node(s) were unschedulable",)


@pytest.mark.parametrize(
    ("ready", "pressure", "tolerations", "reason"),
    [
        ("True", frozenset(), (), None),
        (None, frozenset(), (), None),  # no Ready condition reported: no implied taint
        ("False", frozenset(), (), NOT_READY),
        ("Unknown", frozenset(), (), UNREACHABLE),
        ("True", frozenset({"MemoryPressure"}), (),
         "node(s) had untolerated taint {node.kubernetes.io/memory-pressure: }"),
        ("True", frozenset({"DiskPressure", "PIDPressure"}), (),
         "node(s) had untolerated taint {node.kubernetes.io/disk-pressure: }"),
        ("True", frozenset({"PIDPressure"}), (),
         "node(s) had untolerated taint {node.kubernetes.io/pid-pressure: }"),
        ("True", frozenset({"NetworkUnavailable"}), (),
         "node(s) had untolerated taint {node.kubernetes.io/network-unavailable: }"),
        ("False", frozenset(), TOLERATE_ALL, None),
        ("False", frozenset(), (Toleration("node.kubernetes.io/not-ready", "Exists"),), None),
        # Tolerating NoExecute only is not enough for the NoSchedule taint.
        ("False", frozenset(), (NOT_READY_NO_EXECUTE,), NOT_READY),
    ],
)  # fmt: skip
def test_node_conditions(
    ready: str | None,
    pressure: frozenset[str],
    tolerations: tuple[Toleration, ...],
    reason: str | None,
) -> None:
    status = node_conditions(shape(tolerations=tolerations), node(ready=ready, pressure=pressure))
    assert status.reasons == ((reason,) if reason else ())
    assert status.ok is (reason is None)


GPU = Taint("nvidia.com/gpu", "present", "NoSchedule")


@pytest.mark.parametrize(
    ("taints", "tolerations", "reason"),
    [
        ((), (), None),
        ((GPU,), (), GPU_REASON),
        ((GPU,), (Toleration("nvidia.com/gpu", "Equal", "present", "NoSchedule"),), None),
        ((GPU,), (Toleration("nvidia.com/gpu", "Equal", "absent"),), GPU_REASON),
        ((GPU,), (Toleration("nvidia.com/gpu", "Exists"),), None),
        ((GPU,), (Toleration("", "Exists"),), None),
        ((GPU,), (Toleration("nvidia.com/gpu", "Exists", "", "NoExecute"),), GPU_REASON),
        ((Taint("evict", "", "NoExecute"),), (), "node(s) had untolerated taint {evict: }"),
        # PreferNoSchedule never filters: it only lowers the score.
        ((Taint("soft", "x", "PreferNoSchedule"),), (), None),
        ((Taint("a", "1", "NoSchedule"), Taint("b", "2", "NoSchedule")),
         (Toleration("a", "Exists"),), "node(s) had untolerated taint {b: 2}"),
    ],
)  # fmt: skip
def test_taint_toleration(
    taints: tuple[Taint, ...], tolerations: tuple[Toleration, ...], reason: str | None
) -> None:
    status = taint_toleration(shape(tolerations=tolerations), node(taints=taints))
    assert status.reasons == ((reason,) if reason else ())
    assert status.code is (Code.SUCCESS if reason is None else Code.UNRESOLVABLE)


LABELS = {"zone": "a", "pool": "sandbox", "cores": "16"}


def term(*reqs: Requirement, fields: tuple[Requirement, ...] = ()) -> SelectorTerm:
    return SelectorTerm(reqs, fields)


@pytest.mark.parametrize(
    ("selector", "terms", "ok"),
    [
        ((), None, True),
        ((("zone", "a"),), None, True),
        ((("zone", "b"),), None, False),
        ((("zone", "a"), ("pool", "gpu")), None, False),
        ((("missing", "x"),), None, False),
        ((), (term(Requirement("zone", "In", ("a", "b"))),), True),
        ((), (term(Requirement("zone", "In", ("b",))),), False),
        ((), (term(Requirement("zone", "NotIn", ("b",))),), True),
        ((), (term(Requirement("zone", "NotIn", ("a",))),), False),
        ((), (term(Requirement("absent", "NotIn", ("a",))),), True),
        ((), (term(Requirement("pool", "Exists")),), True),
        ((), (term(Requirement("absent", "Exists")),), False),
        ((), (term(Requirement("absent", "DoesNotExist")),), True),
        ((), (term(Requirement("pool", "DoesNotExist")),), False),
        ((), (term(Requirement("cores", "Gt", ("8",))),), True),
        ((), (term(Requirement("cores", "Gt", ("16",))),), False),
        ((), (term(Requirement("cores", "Lt", ("32",))),), True),
        ((), (term(Requirement("cores", "Lt", ("16",))),), False),
        ((), (term(Requirement("zone", "Gt", ("1",))),), False),  # not an integer
        ((), (term(Requirement("absent", "Lt", ("1",))),), False),
        ((), (term(Requirement("cores", "Bogus", ("1",))),), False),
        # Expressions in one term are ANDed; terms are ORed.
        ((), (term(Requirement("zone", "In", ("a",)), Requirement("pool", "In", ("x",))),), False),
        ((), (term(Requirement("zone", "In", ("z",))), term(Requirement("pool", "Exists"))), True),
        ((), (term(),), False),  # an empty term matches nothing
        ((), (), False),  # no terms: nothing matches
        ((), (term(fields=(Requirement("metadata.name", "In", ("n1",)),)),), True),
        ((), (term(fields=(Requirement("metadata.name", "NotIn", ("n1",)),)),), False),
        # nodeSelector and affinity must both hold.
        ((("zone", "b"),), (term(Requirement("pool", "Exists")),), False),
    ],
)  # fmt: skip
def test_node_affinity(
    selector: tuple[tuple[str, str], ...], terms: tuple[SelectorTerm, ...] | None, ok: bool
) -> None:
    status = node_affinity(shape(node_selector=selector, affinity=terms), node(labels=LABELS))
    assert status.ok is ok
    if not ok:
        assert status.reasons == ("node(s) didn't match Pod's node affinity/selector",)


@pytest.mark.parametrize(("free_pods", "ok"), [(5, True), (1, True), (0, False), (-2, False)])
def test_max_pods(free_pods: int, ok: bool) -> None:
    status = max_pods(shape(), Capacity(10**6, 10**12, 10**12, free_pods))
    assert status.ok is ok
    assert status.reasons == (() if ok else ("Too many pods",))


GiB = 2**30


@pytest.mark.parametrize(
    ("requests", "free", "reasons"),
    [
        (SANDBOX, Capacity(250, 512 * 2**20, 0, 1), ()),
        (SANDBOX, Capacity(249, 512 * 2**20, 0, 1), ("Insufficient cpu",)),
        (SANDBOX, Capacity(250, 512 * 2**20 - 1, 0, 1), ("Insufficient memory",)),
        (SANDBOX, Capacity(0, 0, 0, 1), ("Insufficient cpu", "Insufficient memory")),
        # Zero requests always fit, even on an overcommitted node.
        (Resources(), Capacity(-5, -5, -5, 1), ()),
        (Resources(0, 0, GiB), Capacity(1, 1, GiB - 1, 1), ("Insufficient ephemeral-storage",)),
        (Resources(100, 0, 0, GPUS), Capacity(1000, 0, 0, 1), ("Insufficient nvidia.com/gpu",)),
        (Resources(100, 0, 0, GPUS), Capacity(1000, 0, 0, 1, (("nvidia.com/gpu", 2),)), ()),
    ],
)  # fmt: skip
def test_resources_fit(requests: Resources, free: Capacity, reasons: tuple[str, ...]) -> None:
    status = resources_fit(shape(requests=requests), free)
    assert status.reasons == reasons
    assert status.code is (Code.SUCCESS if not reasons else Code.UNSCHEDULABLE)
