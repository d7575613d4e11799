"""Pure placement engine: capacity model, filters, scores and batch planning.

Pure by contract (see the import-linter contracts in pyproject.toml): no I/O, no Kubernetes
or HTTP client, no clock it does not receive. Kubernetes JSON objects go in at the edge
(:mod:`scheduler.decoder`); everything inside works on the typed models of
:mod:`scheduler.model`. Start with :class:`Scheduler` and docs/scheduler.md.
"""

from scheduler.cluster import ClusterModel, NodeUsage, UsageSnapshot
from scheduler.decoder import Decoder, node_from_json, normalize_image, pod_from_json, pod_requests
from scheduler.engine import Scheduler
from scheduler.filters import Capacity, NodeFilter
from scheduler.ledger import AssumedLedger, Reservation
from scheduler.messages import unschedulable_message
from scheduler.model import (
    Code,
    NodeInfo,
    Pod,
    PodShape,
    Requirement,
    Resources,
    SelectorTerm,
    Status,
    Taint,
    Toleration,
)
from scheduler.plan import Assignment, Plan, Unschedulable
from scheduler.quantity import QuantityError, QuantityParser, parse_quantity
from scheduler.settings import Headroom, SchedulerSettings, ScoreWeights

__all__ = [
    "Assignment",
    "AssumedLedger",
    "Capacity",
    "ClusterModel",
    "Code",
    "Decoder",
    "Headroom",
    "NodeFilter",
    "NodeInfo",
    "NodeUsage",
    "Plan",
    "Pod",
    "PodShape",
    "QuantityError",
    "QuantityParser",
    "Requirement",
    "Reservation",
    "Resources",
    "Scheduler",
    "SchedulerSettings",
    "ScoreWeights",
    "SelectorTerm",
    "Status",
    "Taint",
    "Toleration",
    "Unschedulable",
    "UsageSnapshot",
    "node_from_json",
    "normalize_image",
    "parse_quantity",
    "pod_from_json",
    "pod_requests",
    "unschedulable_message",
]
