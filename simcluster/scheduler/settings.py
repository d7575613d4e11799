"""The default scheduler's settings, in a module of their own so ``ClusterSettings`` and the
profile parser import them without importing the scheduler's loop.

Defaults are kube-scheduler's: its API client's ``kubeAPIQPS`` 50 and ``kubeAPIBurst`` 100
(what caps its binds, ~50 pods/s: the contrast docs/load.md draws with Sandman's binder),
the queue's ``podInitialBackoffSeconds`` 1 and ``podMaxBackoffSeconds`` 10, and
``podMaxInUnschedulablePodsDuration`` 5 minutes. It is off unless a profile turns it on: a
bare ``ClusterSettings`` (an API server of tests) keeps every unbound pod Pending, which
tests of the binding path rely on; the built-in profiles turn it on.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["DEFAULT_SCHEDULER_NAME", "SchedulerSettings"]

#: ``spec.schedulerName`` the API server defaults a pod to; pods naming it (or none) are ours.
DEFAULT_SCHEDULER_NAME = "default-scheduler"


@dataclass(frozen=True, slots=True)
class SchedulerSettings:
    #: Run the default scheduler (profile ``scheduler.enabled``).
    enabled: bool = False
    #: Requests per second of the scheduler's API client (binds, status writes, events):
    #: kube-scheduler's ``kubeAPIQPS``; <= 0 unlimited.
    binds_per_s: float = 50.0
    #: The client's burst (``kubeAPIBurst``).
    burst: int = 100
    #: Back-off of a pod that failed to schedule: doubling from ``backoff_initial_s`` up to
    #: ``backoff_max_s`` per attempt, as upstream's scheduling queue.
    backoff_initial_s: float = 1.0
    backoff_max_s: float = 10.0
    #: An unschedulable pod is retried after this long even when nothing in the cluster
    #: changed (upstream's ``podMaxInUnschedulablePodsDuration``).
    unschedulable_timeout_s: float = 300.0
