"""Groups (gangs): sandboxes placed all or nothing, on as few nodes as fit.

RL algorithms such as GRPO run G rollouts of one task together: the step waits for the
slowest of them, so a group with one sandbox placed and G-1 pending is worth nothing, and G
sandboxes of one image spread over G nodes cost G pulls where one node would cost one. A
batch create may therefore name a *group*: its pods carry ``sandman.io/group`` (the group's
key, ``<namespace>/<name>``) and ``sandman.io/group-size`` (G), and the scheduler treats them
as one unit, in the style of kube-scheduler's coscheduling plugin:

- **wait** (:class:`GangRoom`, PreEnqueue/Permit): members are collected across plans until
  all G are pending (the controller plans pending pods in batches, and a batch of creates
  arrives over several watch events); none is placed before. After ``group_wait_s`` an
  incomplete group's members are reported unschedulable ("k of G members pending") and
  collected again when they come back;
- **filter**: the feasible nodes and how many members each still takes (the placer's own
  node filters and slot counts, so "fits" means what it means for any pod);
- **score**: nodes that take the most members first (capped at what is still needed), then
  nodes holding (or already pulling) the image, then the placer's rank. Taking the largest
  first gives the fewest nodes that hold G (an exchange argument: any cover by k nodes can be
  swapped, node by node, for the k largest);
- **reserve**: only when the chosen nodes hold all G are they reserved, in one go; otherwise
  nothing is, and every member gets the same expected rejection, a :class:`~scheduler.model.
  Status` with code UNSCHEDULABLE and a reason naming how many fit. The members stay pending
  together and are planned again when capacity may have appeared.

A group once placed is *admitted* for ``group_ttl_s``: a later member (a replacement of one
that failed admission on its node) is then placed without waiting for the others.

The start-queue cap does not split a group: one node starting G pods of one image after one
pull beats G nodes each pulling it (the same argument as ``pull_join_cap``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from scheduler.model import Code, Pod, Status

__all__ = ["GangRoom", "GroupKey", "choose_nodes", "differ_status", "gang_status",
           "waiting_status"]  # fmt: skip

GroupKey = str


@dataclass(slots=True)
class _Waiting:
    size: int
    since: float
    members: dict[str, Pod] = field(default_factory=dict)


@dataclass(slots=True)
class GangRoom:
    """Members of groups not yet placed, and the groups already admitted (until when)."""

    #: Seconds an incomplete group waits for its other members before they are reported.
    wait_s: float = 30.0
    waiting: dict[GroupKey, _Waiting] = field(default_factory=dict)
    admitted: dict[GroupKey, float] = field(default_factory=dict)

    def copy(self) -> GangRoom:
        waiting = {k: _Waiting(w.size, w.since, dict(w.members)) for k, w in self.waiting.items()}
        return GangRoom(self.wait_s, waiting, dict(self.admitted))

    def add(self, pod: Pod, now: float) -> None:
        assert pod.group is not None
        entry = self.waiting.get(pod.group)
        if entry is None:
            entry = self.waiting[pod.group] = _Waiting(max(pod.group_size, 1), now)
        entry.size = max(entry.size, pod.group_size)
        entry.members[pod.uid] = pod

    def discard(self, uid: str) -> None:
        """A member was deleted or bound elsewhere: it no longer waits."""
        for key, entry in list(self.waiting.items()):
            if entry.members.pop(uid, None) is not None and not entry.members:
                del self.waiting[key]

    def ready(self, now: float) -> tuple[list[tuple[GroupKey, list[Pod]]], list[Pod], list[str]]:
        """Groups to place now (all members pending, or admitted before), members whose wait
        ran out (to report), and the uids still waiting."""
        go: list[tuple[GroupKey, list[Pod]]] = []
        timed_out: list[Pod] = []
        for key, entry in list(self.waiting.items()):
            admitted = self.admitted.get(key, -1.0) >= now
            if admitted or len(entry.members) >= entry.size:
                go.append((key, list(entry.members.values())))
                del self.waiting[key]
            elif now - entry.since >= self.wait_s:
                timed_out.extend(entry.members.values())
                del self.waiting[key]
        still = [uid for entry in self.waiting.values() for uid in entry.members]
        return go, timed_out, still

    def admit(self, key: GroupKey, until: float) -> None:
        self.admitted[key] = until

    def expire(self, now: float) -> None:
        for key in [k for k, until in self.admitted.items() if until < now]:
            del self.admitted[key]


def choose_nodes(
    slots: dict[int, int], holders: set[int], ranks: dict[int, int], need: int
) -> dict[int, int] | None:
    """Members per node (candidate index -> count) that hold ``need`` on the fewest nodes,
    nodes with the image preferred among equals; None when all candidates together do not
    hold ``need`` (then nothing may be reserved)."""
    if need <= 0:
        return {}
    order = sorted(
        (i for i, s in slots.items() if s > 0),
        key=lambda i: (-min(slots[i], need), i not in holders, ranks.get(i, 0), i),
    )
    out: dict[int, int] = {}
    left = need
    for i in order:
        take = min(slots[i], left)
        out[i] = take
        left -= take
        if left == 0:
            return out
    return None


def gang_status(key: GroupKey, fit: int, need: int, nodes: int) -> Status:
    """The expected rejection of a whole group (no member placed)."""
    reason = (
        f"group {key}: {need} sandboxes are placed together or not at all, and only {fit} "
        f"fit on {nodes} feasible node(s)"
    )
    return Status(Code.UNSCHEDULABLE, (reason,))


def differ_status(key: GroupKey) -> Status:
    reason = f"group {key}: its members ask for different resources or nodes"
    return Status(Code.UNSCHEDULABLE, (reason,))


def waiting_status(key: GroupKey, pending: int, size: int) -> Status:
    reason = f"group {key}: {pending} of {size} members pending; waiting for the rest"
    return Status(Code.UNSCHEDULABLE, (reason,))
