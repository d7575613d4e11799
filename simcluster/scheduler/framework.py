"""The default scheduler's decision, pure: filter plugins, a score, the node picked, and the
message a pod gets when no node fits.

Why pure and separate from the loop that feeds it: what kube-scheduler decides is the part a
test (and a hypothesis property) must be able to check node by node without a cluster, and
what it *says* when it fails is what operators read in ``kubectl describe``. So this module
takes plain values (``NodeInfo``, ``PodInfo``) and returns plain values (``Status``,
``Decision``); the loop (``scheduler.py``) owns the API.

Shaped as upstream's scheduling framework (pkg/scheduler/framework/plugins), in upstream's
default order, each filter answering a ``Status`` with upstream's reason strings; a node's
first failing filter is its reason (upstream's ``RunFilterPlugins`` stops there too):

- NodeUnschedulable: ``spec.unschedulable`` (cordon) unless the pod tolerates
  ``node.kubernetes.io/unschedulable:NoSchedule``: "node(s) were unschedulable";
- TaintToleration: an untolerated ``NoSchedule``/``NoExecute`` taint: "node(s) had
  untolerated taint {key: value}". A node that is not Ready carries
  ``node.kubernetes.io/not-ready`` (Ready False) or ``.../unreachable`` (Unknown), as the node
  lifecycle controller's TaintNodesByCondition would have written it;
- NodeAffinity: ``nodeSelector`` and required ``nodeAffinity`` (matchExpressions In, NotIn,
  Exists, DoesNotExist, Gt, Lt; matchFields on ``metadata.name``; terms ORed, an empty term
  matching nothing): "node(s) didn't match Pod's node affinity/selector";
- NodeResourcesFit: pods, cpu and memory requests against allocatable minus what the node's
  non-terminal pods request: "Too many pods", "Insufficient cpu", "Insufficient memory" (all
  that apply).

Score: NodeResourcesFit's LeastAllocated (cpu and memory weighted equally, with upstream's
non-zero defaults of 100m / 200Mi for a pod that requests nothing) plus TaintToleration's
(weight 3: fewer untolerated ``PreferNoSchedule`` taints score higher). Ties go to the node
whose name sorts first (upstream picks among ties at random; a simulator is deterministic).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "NOT_READY_TAINT",
    "UNREACHABLE_TAINT",
    "Decision",
    "NodeInfo",
    "PodInfo",
    "Status",
    "decide",
    "fit_error",
    "run_filters",
    "score",
]

Obj = Mapping[str, Any]
NOT_READY_TAINT = "node.kubernetes.io/not-ready"
UNREACHABLE_TAINT = "node.kubernetes.io/unreachable"
UNSCHEDULABLE_TAINT = "node.kubernetes.io/unschedulable"
#: Upstream's ``schedutil`` defaults for a container without requests, in the score only.
NONZERO_CPU_MILLI = 100
NONZERO_MEMORY = 200 * 2**20
TAINT_SCORE_WEIGHT = 3
MAX_NODE_SCORE = 100


@dataclass(frozen=True, slots=True)
class PodInfo:
    """What the filters read of a pending pod."""

    namespace: str
    name: str
    cpu_milli: int = 0
    memory: int = 0
    node_selector: Mapping[str, str] = field(default_factory=dict)
    #: ``affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms``
    required_terms: tuple[Obj, ...] = ()
    tolerations: tuple[Obj, ...] = ()


@dataclass(slots=True)
class NodeInfo:
    """A node as the scheduler's cache sees it: what it offers and what is bound there."""

    name: str
    allocatable_cpu_milli: int
    allocatable_memory: int
    allocatable_pods: int
    labels: Mapping[str, str] = field(default_factory=dict)
    taints: tuple[Obj, ...] = ()
    unschedulable: bool = False
    requested_cpu_milli: int = 0
    requested_memory: int = 0
    pods: int = 0
    #: Requests of the node's pods with upstream's non-zero defaults (the score's view).
    nonzero_cpu_milli: int = 0
    nonzero_memory: int = 0

    def add(self, cpu: int, memory: int, sign: int = 1) -> None:
        """Count (``sign`` 1) or stop counting (-1) one pod's requests on this node."""
        self.requested_cpu_milli += sign * cpu
        self.requested_memory += sign * memory
        self.pods += sign
        self.nonzero_cpu_milli += sign * (cpu or NONZERO_CPU_MILLI)
        self.nonzero_memory += sign * (memory or NONZERO_MEMORY)


@dataclass(frozen=True, slots=True)
class Status:
    """A filter's answer: success when ``reasons`` is empty."""

    plugin: str = ""
    reasons: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return not self.reasons


OK = Status()


@dataclass(frozen=True, slots=True)
class Decision:
    """Where the pod goes (``node``), or why it goes nowhere (``message``)."""

    node: str | None
    message: str = ""
    statuses: Mapping[str, Status] = field(default_factory=dict)


# --- tolerations and node affinity (component-helpers/scheduling/corev1) ---------------------
def tolerates(toleration: Obj, taint: Obj) -> bool:
    """Upstream's ``Toleration.ToleratesTaint``."""
    effect = toleration.get("effect") or ""
    if effect and effect != taint.get("effect"):
        return False
    key = toleration.get("key") or ""
    if key and key != taint.get("key"):
        return False
    op = toleration.get("operator") or "Equal"
    if op == "Exists":
        return True
    return op == "Equal" and (toleration.get("value") or "") == (taint.get("value") or "")


def _untolerated(
    taints: Iterable[Obj], tolerations: Sequence[Obj], effects: tuple[str, ...]
) -> Obj | None:
    for taint in taints:
        if taint.get("effect") in effects and not any(tolerates(t, taint) for t in tolerations):
            return taint
    return None


def _requirement_matches(req: Obj, value: str | None) -> bool:
    op, values = req.get("operator", ""), list(req.get("values") or ())
    if op == "In":
        return value is not None and value in values
    if op == "NotIn":
        return value is None or value not in values
    if op == "Exists":
        return value is not None
    if op == "DoesNotExist":
        return value is None
    if op in ("Gt", "Lt") and value is not None and len(values) == 1:
        try:
            have, bound = int(value), int(values[0])
        except ValueError:
            return False
        return have > bound if op == "Gt" else have < bound
    return False


def term_matches(term: Obj, name: str, labels: Mapping[str, str]) -> bool:
    """A node selector term: every expression and field requirement holds; an empty term
    matches no node (upstream's ``NodeSelectorRequirementsAsSelector`` of nothing)."""
    expressions = list(term.get("matchExpressions") or ())
    fields = list(term.get("matchFields") or ())
    if not expressions and not fields:
        return False
    if not all(_requirement_matches(r, labels.get(r.get("key", ""))) for r in expressions):
        return False
    return all(r.get("key") == "metadata.name" and _requirement_matches(r, name) for r in fields)


# --- filters --------------------------------------------------------------------------------
def node_unschedulable(pod: PodInfo, node: NodeInfo) -> Status:
    cordon = {"key": UNSCHEDULABLE_TAINT, "effect": "NoSchedule"}
    if node.unschedulable and not any(tolerates(t, cordon) for t in pod.tolerations):
        return Status("NodeUnschedulable", ("node(s) were unschedulable",))
    return OK


def taint_toleration(pod: PodInfo, node: NodeInfo) -> Status:
    taint = _untolerated(node.taints, pod.tolerations, ("NoSchedule", "NoExecute"))
    if taint is None:
        return OK
    why = f"node(s) had untolerated taint {{{taint.get('key', '')}: {taint.get('value') or ''}}}"
    return Status("TaintToleration", (why,))


def node_affinity(pod: PodInfo, node: NodeInfo) -> Status:
    selector_ok = all(node.labels.get(k) == v for k, v in pod.node_selector.items())
    terms_ok = not pod.required_terms or any(
        term_matches(t, node.name, node.labels) for t in pod.required_terms
    )
    if selector_ok and terms_ok:
        return OK
    return Status("NodeAffinity", ("node(s) didn't match Pod's node affinity/selector",))


def node_resources_fit(pod: PodInfo, node: NodeInfo) -> Status:
    reasons = []
    if node.pods + 1 > node.allocatable_pods:
        reasons.append("Too many pods")
    if pod.cpu_milli and node.requested_cpu_milli + pod.cpu_milli > node.allocatable_cpu_milli:
        reasons.append("Insufficient cpu")
    if pod.memory and node.requested_memory + pod.memory > node.allocatable_memory:
        reasons.append("Insufficient memory")
    return Status("NodeResourcesFit", tuple(reasons)) if reasons else OK


FILTERS = (node_unschedulable, taint_toleration, node_affinity, node_resources_fit)


def run_filters(pod: PodInfo, node: NodeInfo) -> Status:
    """The first filter that rejects the node, or success."""
    for plugin in FILTERS:
        status = plugin(pod, node)
        if not status.ok:
            return status
    return OK


# --- score ----------------------------------------------------------------------------------
def _least_allocated(requested: int, allocatable: int) -> float:
    if allocatable <= 0 or requested > allocatable:
        return 0.0
    return (allocatable - requested) * MAX_NODE_SCORE / allocatable


def score(pod: PodInfo, node: NodeInfo, max_prefer_taints: int) -> float:
    """LeastAllocated (with the pod placed) plus TaintToleration's PreferNoSchedule score."""
    cpu = node.nonzero_cpu_milli + (pod.cpu_milli or NONZERO_CPU_MILLI)
    mem = node.nonzero_memory + (pod.memory or NONZERO_MEMORY)
    fit = (
        _least_allocated(cpu, node.allocatable_cpu_milli)
        + _least_allocated(mem, node.allocatable_memory)
    ) / 2
    if max_prefer_taints == 0:
        return fit + TAINT_SCORE_WEIGHT * MAX_NODE_SCORE
    bad = _prefer_taints(pod, node)
    return fit + TAINT_SCORE_WEIGHT * MAX_NODE_SCORE * (max_prefer_taints - bad) / max_prefer_taints


def _prefer_taints(pod: PodInfo, node: NodeInfo) -> int:
    return sum(
        1
        for t in node.taints
        if t.get("effect") == "PreferNoSchedule"
        and not any(tolerates(x, t) for x in pod.tolerations)
    )


# --- one scheduling cycle -------------------------------------------------------------------
def fit_error(total_nodes: int, statuses: Iterable[Status]) -> str:
    """Upstream's ``FitError.Error()``: "0/N nodes are available: <count reason>, ....", the
    "count reason" strings sorted as strings, as upstream sorts them."""
    if total_nodes == 0:
        return "no nodes available to schedule pods"
    counts = Counter(reason for status in statuses for reason in status.reasons)
    histogram = sorted(f"{n} {reason}" for reason, n in counts.items())
    message = f"0/{total_nodes} nodes are available:"
    if histogram:
        message += f" {', '.join(histogram)}."
    return message


def decide(pod: PodInfo, nodes: Iterable[NodeInfo]) -> Decision:
    """Filter every node, score the feasible ones, pick the best (ties: first by name)."""
    feasible: list[NodeInfo] = []
    statuses: dict[str, Status] = {}
    for node in nodes:
        status = run_filters(pod, node)
        if status.ok:
            feasible.append(node)
        else:
            statuses[node.name] = status
    if not feasible:
        return Decision(None, fit_error(len(statuses), statuses.values()), statuses)
    worst = max(_prefer_taints(pod, n) for n in feasible)
    best = min(feasible, key=lambda n: (-score(pod, n, worst), n.name))
    return Decision(best.name, "", statuses)
