"""simcluster's default scheduler: what kube-scheduler does beside KWOK's simulated nodes,
reduced to filters by resources, taints, cordon and node affinity, a least-allocated score
and a bind through the API (docs/simcluster.md, "Default scheduler").

- :mod:`.framework` — the pure decision: filter plugins, score, the FitError message;
- :mod:`.cache` — the cluster as the scheduler sees it, kept by a store listener;
- :mod:`.queue` — active, back-off and unschedulable pods, woken by cluster changes;
- :mod:`.scheduler` — the loop: decide, bind (``pods/binding``), or report Unschedulable;
- :mod:`.settings` — ``SchedulerSettings`` (profile section ``scheduler``).
"""

from simcluster.scheduler.scheduler import SCHEDULER_USER, DefaultScheduler
from simcluster.scheduler.settings import DEFAULT_SCHEDULER_NAME, SchedulerSettings

__all__ = ["DEFAULT_SCHEDULER_NAME", "SCHEDULER_USER", "DefaultScheduler", "SchedulerSettings"]
