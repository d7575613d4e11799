"""The placement loop of one plan: feasible nodes, heaps of nodes, runs of pods.

It places the groups of equivalence classes (``classes.py``) one after another, as
``engine.plan_batch`` hands them over, reserving every assignment in the assumed ledger as
it is made, so later classes in the same plan, and later plans, see the capacity as taken;
what it places is a ``plan.py`` outcome, and what "fits" means is ``fit.py``'s.

Why two levels of classes: pods are grouped by their full :class:`PodShape`, but feasibility
and slot counts do not depend on the image. With one task image per task (a burst of 11,858
sandboxes may span hundreds of images), judging every node once per *image* would cost
O(images x nodes). So classes that differ only in their images form one *group*: the group
judges every node once (filters by node gate, slot counts, PreferNoSchedule) and keeps one
shared heap of nodes ranked without image locality. Each image class then adds a small heap
of just the nodes that hold its image, ranked with the locality bonus, and takes the better
of the two tops. A node that takes pods gets a fresh entry in both heaps (its score rose);
older entries, and entries of nodes without slots, are dropped when they surface. A class
so costs O(pods x log nodes + nodes holding its images), not O(nodes).

Ranking (the burst policy): tier 0, nodes whose start queue is below the cap, by score
(packing, locality, taints); a node stays best while it fills (its score only rises), so a
whole run goes onto it at once. Tier 1, nodes at the cap: once a class meets it, the rest of
its group is levelled over all start queues in one water-filling step, each node taking
pods whose image it holds first.
"""

from __future__ import annotations

import heapq
from collections.abc import Hashable, Sequence

from scheduler import gang
from scheduler.cluster import ClusterModel, NodeUsage
from scheduler.fit import capacity_left, check_capacity, check_node, slots_left
from scheduler.messages import reason_histogram, unschedulable_message
from scheduler.model import NodeInfo, Pod, PodShape, Resources, Status
from scheduler.plan import Assignment, Unschedulable
from scheduler.scores import (
    image_locality,
    most_allocated,
    prefer_no_schedule_count,
    taint_toleration,
)
from scheduler.settings import SchedulerSettings
from scheduler.table import NodeTable

__all__ = ["Placer"]

Key = tuple[float, ...]


class _Candidate:
    """A feasible node while one group is being placed."""

    __slots__ = ("idx", "node", "rank", "slots", "static", "usage")

    def __init__(self, idx: int, node: NodeInfo, usage: NodeUsage, slots: int, rank: int) -> None:
        self.idx, self.node, self.usage, self.slots, self.rank = idx, node, usage, slots, rank
        self.static = 0.0


def _water_fill(nodes: list[_Candidate], pods: int) -> dict[int, int]:
    """Pods per node that keep the longest start queue as short as possible.

    ``nodes`` are in preference order; the last, partly filled level goes to the first ones.
    """
    want = min(pods, sum(c.slots for c in nodes))
    if want <= 0:
        return {}

    def filled(level: int) -> int:
        return sum(min(c.slots, max(0, level - c.usage.starting)) for c in nodes)

    lo = min(c.usage.starting for c in nodes)
    hi = max(c.usage.starting + c.slots for c in nodes)
    while lo < hi:
        mid = (lo + hi) // 2
        lo, hi = (mid + 1, hi) if filled(mid) < want else (lo, mid)
    runs = {c.idx: min(c.slots, max(0, lo - 1 - c.usage.starting)) for c in nodes}
    extra = want - sum(runs.values())
    for c in nodes:
        if extra <= 0:
            break
        if c.usage.starting + runs[c.idx] == lo - 1 and runs[c.idx] < c.slots:
            runs[c.idx] += 1
            extra -= 1
    return runs


class _NodeHeap:
    """A heap of node keys that remembers each node's latest key.

    Every change to a node pushes a fresh key, so an entry that is not its node's latest
    is a stale duplicate and is dropped when it surfaces (instead of being re-keyed and
    kept, which would let duplicates pile up over hundreds of classes).
    """

    __slots__ = ("entries", "latest")

    def __init__(self, keys: list[Key]) -> None:
        heapq.heapify(keys)
        self.entries = keys
        self.latest: dict[int, Key] = {int(k[-1]): k for k in keys}

    def push(self, key: Key) -> None:
        heapq.heappush(self.entries, key)
        self.latest[int(key[-1])] = key

    def replace_top(self, key: Key) -> None:
        heapq.heapreplace(self.entries, key)
        self.latest[int(key[-1])] = key

    def pop_top(self) -> None:
        top = heapq.heappop(self.entries)
        if self.latest.get(int(top[-1])) is top:
            del self.latest[int(top[-1])]


class Placer:
    """One call of ``engine.plan_batch``: the nodes, their limits, and the output lists."""

    def __init__(
        self, model: ClusterModel, settings: SchedulerSettings, table: NodeTable, now: float
    ) -> None:
        self.model, self.settings, self.table = model, settings, table
        self.deadline = now + settings.bind_timeout_s
        self.nodes, self.limits, self.ranks = table.refresh(
            model.nodes, model.node_set_version, model.node_version
        )
        self.now = now
        self.position = {node.name: i for i, node in enumerate(self.nodes)}
        self.assignments: list[Assignment] = []
        self.unschedulable: list[Unschedulable] = []
        self.deferred: list[str] = []
        self.failed: list[tuple[PodShape, list[Pod]]] = []

    # -- judging nodes, once per group ------------------------------------------------------
    def candidates(self, shape: PodShape) -> dict[int, _Candidate]:
        """Feasible nodes with free slots and their PreferNoSchedule score, in one pass.

        Node filters run once per distinct node *gate* (taints, conditions, cordon; plus
        labels when the group selects on them), so a uniform 5,000-node cluster costs a
        handful of filter calls instead of thousands. This loop is the fixed cost of a plan
        on a big cluster, hence the inlined arithmetic.
        """
        extra = self.settings.extra_node_filters
        # Plugins may read anything on the node: then every node is judged on its own.
        label_free = not shape.node_selector and shape.affinity is None and not extra
        verdicts: dict[Hashable, bool] = {}
        usages, req, ranks, limits = self.model.usage, shape.requests, self.ranks, self.limits
        rc, rm = req.cpu, req.memory
        simple = not req.storage and not req.extended and not any(lim.extended for lim in limits)
        out: dict[int, _Candidate] = {}
        for i, node in enumerate(self.nodes):
            gate: Hashable = (
                (node.unschedulable, node.ready, node.pressure, node.taints)
                if label_free
                else node.name
            )
            ok = verdicts.get(gate)
            if ok is None:
                ok = verdicts[gate] = check_node(shape, node, extra).ok
            if not ok:
                continue
            usage, lim = usages[node.name], limits[i]
            if simple and not usage.extended:
                slots = lim.pods - usage.pods
                if rc > 0:
                    slots = min(slots, (lim.cpu - usage.cpu) // rc)
                if rm > 0:
                    slots = min(slots, (lim.memory - usage.memory) // rm)
            else:
                slots = slots_left(req, lim, usage)
            if slots > 0:
                out[i] = _Candidate(i, node, usage, slots, ranks[i])
        self._score_taints(shape, out)
        return out

    def _score_taints(self, shape: PodShape, cands: dict[int, _Candidate]) -> None:
        """The PreferNoSchedule part of the score, normalised over the feasible nodes."""
        weight = self.settings.weights.taint_toleration
        counts = {
            i: prefer_no_schedule_count(shape, c.node) for i, c in cands.items() if c.node.taints
        }
        worst = max(counts.values(), default=0)
        for i, c in cands.items():
            c.static = weight * taint_toleration(counts.get(i, 0), worst)

    def _image_bonus(self, shape: PodShape, cands: dict[int, _Candidate]) -> dict[int, float]:
        """Image locality of the feasible nodes that hold any of the class's images."""
        weight = self.settings.weights.image_locality
        if not shape.images or weight <= 0:
            return {}
        index = self.table.image_index(self.nodes, self.model)
        holders = {i for image in shape.images for i in index.get(image, ()) if i in cands}
        incoming, position = self.model.incoming_nodes, self.position
        for image in shape.images:  # nodes already pulling it for earlier pods
            holders.update(
                i for n in incoming.get(image, ()) if (i := position.get(n, -1)) in cands
            )
        if len(shape.images) == 1:
            return dict.fromkeys(holders, weight * 100.0)
        return {i: weight * image_locality(shape, self._images(cands[i].node)) for i in holders}

    def _joining(self, shape: PodShape, cands: dict[int, _Candidate]) -> set[int]:
        """Nodes pulling every image of the class for earlier pods, none of them present:
        a pod placed there joins the pull under way (it starts with the others once the pull
        ends) instead of starting a new one elsewhere."""
        if not shape.images or self.settings.pull_join_cap is None:
            return set()
        incoming, position = self.model.incoming, self.position
        out = set()
        for name in self.model.incoming_nodes.get(shape.images[0], ()):
            i = position.get(name, -1)
            if i in cands and all(img in incoming.get(name, ()) for img in shape.images):
                out.add(i)
        return out

    def _limit(self, joining: bool) -> int | None:
        """The start-queue cap of a node; higher for pods joining a pull under way there."""
        cap, join = self.settings.max_starting_per_node, self.settings.pull_join_cap
        if cap is None or not joining or join is None:
            return cap
        return max(cap, join)

    def _images(self, node: NodeInfo) -> set[str]:
        """Images on ``node``: present, prepared, or being pulled for pods placed there."""
        return {*self.model.images_on(node), *self.model.incoming.get(node.name, ())}

    # -- ranking -------------------------------------------------------------------------
    def key(self, c: _Candidate, req: Resources, bonus: float, joining: bool = False) -> Key:
        """Heap key: tier 0 (start queue below the cap) by score, tier 1 by queue length."""
        u, cap = c.usage, self._limit(joining)
        pack = most_allocated(c.node.allocatable, u.cpu + req.cpu, u.memory + req.memory)
        score = c.static + bonus + self.settings.weights.packing * pack
        if cap is None or u.starting < cap:
            return (0, self._pull_tier(c, bonus), -score, c.rank, c.idx)
        return (1, u.starting, -score, c.rank, c.idx)

    def _pull_tier(self, c: _Candidate, bonus: float) -> int:
        """1 when a pod placed here would queue behind the node's pulls (its image is not
        there, and the node already pulls ``pull_slots_per_node`` images), else 0."""
        slots = self.settings.pull_slots_per_node
        if slots is None or bonus > 0:
            return 0
        return int(self.model.pulls_pending(c.node.name) >= slots)

    @staticmethod
    def _top(heap: _NodeHeap, cands: dict[int, _Candidate]) -> Key | None:
        """The heap's best live entry; stale duplicates and full nodes are dropped.

        Every change to a node (a placement) pushes its fresh key into every heap that holds
        it, so the latest entry of a node is always current and needs no re-check.
        """
        entries, latest = heap.entries, heap.latest
        while entries:
            top = entries[0]
            idx = int(top[-1])
            if cands[idx].slots > 0 and latest.get(idx) is top:
                return top
            heap.pop_top()
        return None

    # -- placing ---------------------------------------------------------------------------
    def place_group(self, base: PodShape, classes: list[tuple[PodShape, list[Pod]]]) -> None:
        """Place classes that differ only in their images, sharing one judgement of nodes.

        Once a class finds every start queue full, so will every later class of the group
        (no node frees up during a plan): the rest of the group is then levelled in one step.
        """
        cands = self.candidates(base)
        req = base.requests
        shared = _NodeHeap([self.key(c, req, 0.0) for c in cands.values()])
        overflow: list[tuple[PodShape, list[Pod]]] = []
        for shape, pods in classes:
            if overflow:
                overflow.append((shape, pods))
                continue
            rest, queues_full = self._place_class(shape, pods, cands, shared, req)
            if queues_full:
                overflow.append((shape, rest))
            elif rest:
                self.failed.append((shape, rest))
        if overflow and self.settings.defer_over_cap:
            self.deferred.extend(p.uid for _, pods in overflow for p in pods)
        elif overflow:
            self._level(overflow, cands, req)

    def _place_class(
        self,
        shape: PodShape,
        pods: list[Pod],
        cands: dict[int, _Candidate],
        shared: _NodeHeap,
        req: Resources,
    ) -> tuple[list[Pod], bool]:
        """Place one class on nodes below the start cap; returns the pods left and whether
        they are left because every start queue is full (rather than every node)."""
        bonus = self._image_bonus(shape, cands)
        joining = self._joining(shape, cands)
        local = _NodeHeap(
            [self.key(cands[i], req, b, i in joining) for i, b in bonus.items() if cands[i].slots]
        )
        pos, total = 0, len(pods)
        while pos < total:
            s_top, l_top = self._top(shared, cands), self._top(local, cands)
            use_local = l_top is not None and (s_top is None or l_top < s_top)
            top = l_top if use_local else s_top
            if top is None or top[0] == 1:
                return pods[pos:], top is not None
            c = cands[int(top[-1])]
            cap = self._limit(use_local and c.idx in joining)
            run = c.slots if cap is None else min(c.slots, cap - c.usage.starting)
            run = min(run, total - pos)
            if not use_local and bonus and len(bonus) < len(cands):
                holder = self._spill(bonus, cands)
                if holder is not None:  # wait in a holder's queue rather than pull here
                    self._assign(holder, pods[pos : pos + 1], req)
                    pos += 1
                    holder.slots -= 1
                    if holder.slots > 0:  # fresh keys; the old entries drop when they surface
                        join = holder.idx in joining
                        local.push(self.key(holder, req, bonus[holder.idx], join))
                        shared.push(self.key(holder, req, 0.0))
                    continue
            self._assign(c, pods[pos : pos + run], req)
            pos += run
            c.slots -= run
            heap, other = (local, shared) if use_local else (shared, local)
            if c.slots > 0:
                join = c.idx in joining
                if use_local:
                    heap.replace_top(self.key(c, req, bonus.get(c.idx, 0.0), join))
                else:
                    heap.replace_top(self.key(c, req, 0.0))
                # The node's entry in the other heap is now too pessimistic (packing rises as
                # a node fills): push a fresh one; the old one is dropped when it surfaces.
                if use_local:
                    other.push(self.key(c, req, 0.0))
                elif c.idx in bonus:
                    other.push(self.key(c, req, bonus[c.idx], join))
            else:
                heap.pop_top()
        return [], False

    def _spill(self, bonus: dict[int, float], cands: dict[int, _Candidate]) -> _Candidate | None:
        """The node holding (or pulling) the class's image with the shortest start queue
        below ``pull_join_cap``, when the alternative is a node without it: a pod queued
        behind 15 others there starts in ~3.6 s, one sent elsewhere starts a ~20 s pull. None
        when no holder can take one more (or the join cap is off)."""
        join = self.settings.pull_join_cap
        if join is None:
            return None
        best: _Candidate | None = None
        for i in bonus:
            c = cands[i]
            if c.slots <= 0 or c.usage.starting >= join:
                continue
            if best is None or (c.usage.starting, c.rank) < (best.usage.starting, best.rank):
                best = c
        return best

    def _level(
        self,
        overflow: list[tuple[PodShape, list[Pod]]],
        cands: dict[int, _Candidate],
        req: Resources,
    ) -> None:
        """Spread pods over full start queues so the longest queue is as short as possible.

        Water-filling: find the lowest queue level L that holds the pods (binary search),
        fill every queue up to L-1 and give the last level to the best-scored nodes, in
        O(nodes log pods) rather than a heap operation per pod. Each node then takes pods
        whose image it holds first (image locality still matters when queues are full).
        """
        tier1 = sorted((self.key(c, req, 0.0), c) for c in cands.values() if c.slots > 0)
        runs = _water_fill([c for _, c in tier1], sum(len(pods) for _, pods in overflow))
        queues = [list(reversed(pods)) for _, pods in overflow]  # pop() takes the first pod
        prefs: dict[int, list[int]] = {}
        for k, (shape, _) in enumerate(overflow):
            for i in self._image_bonus(shape, cands):
                prefs.setdefault(i, []).append(k)
        chosen: dict[int, list[Pod]] = {c.idx: [] for _, c in tier1}
        for _, c in tier1:  # first, every node takes pods whose image it holds
            mine, run = chosen[c.idx], runs.get(c.idx, 0)
            for k in prefs.get(c.idx, ()):
                while run > len(mine) and queues[k]:
                    mine.append(queues[k].pop())
        general = 0
        for _, c in tier1:  # then the remaining places take the remaining pods
            mine, run = chosen[c.idx], runs.get(c.idx, 0)
            while run > len(mine) and general < len(queues):
                if queues[general]:
                    mine.append(queues[general].pop())
                else:
                    general += 1
            if mine:
                self._assign(c, mine, req)
                c.slots -= len(mine)
        for (shape, _), left in zip(overflow, queues, strict=True):
            if left:
                self.failed.append((shape, left[::-1]))

    def _assign(self, c: _Candidate, pods: Sequence[Pod], req: Resources) -> None:
        """Reserve a run of pods on one node and record their assignments."""
        name = c.node.name
        # equivalence_classes excluded placed, reserved and repeated uids: no check again.
        self.model.reserve_many([p.uid for p in pods], name, req, self.deadline, check=False)
        images = pods[0].shape.images if pods else ()
        if images and self.settings.incoming_ttl_s > 0:
            on_node = self.model.images_on(c.node)
            until = self.now + self.settings.incoming_ttl_s
            for image in images:
                if image not in on_node:
                    self.model.note_incoming(name, image, until)
        self.assignments.extend(Assignment(p.uid, name, p.namespace, p.name) for p in pods)

    # -- groups (scheduler/gang.py) ---------------------------------------------------------
    def place_gang(self, key: str, pods: list[Pod]) -> bool:
        """Place a whole group or none of it: filter (the feasible nodes and the members
        each takes), score (most members first, then the image's holders), reserve (only if
        the chosen nodes hold every member). False: nothing reserved, every member reported
        with the group's rejection."""
        shape = pods[0].shape
        if any(p.shape != shape for p in pods):
            self.reject(pods, gang.differ_status(key))
            return False
        cands = self.candidates(shape)
        holders = set(self._image_bonus(shape, cands))
        slots = {i: c.slots for i, c in cands.items()}
        chosen = gang.choose_nodes(slots, holders, {i: c.rank for i, c in cands.items()}, len(pods))
        if chosen is None:
            fit = sum(slots.values())
            self.reject(pods, gang.gang_status(key, fit, len(pods), len(cands)))
            return False
        pos = 0
        for i, run in chosen.items():
            c = cands[i]
            self._assign(c, pods[pos : pos + run], shape.requests)
            c.slots -= run
            pos += run
        return True

    def reject(self, pods: list[Pod], status: Status) -> None:
        """Report ``pods`` unschedulable with a group's ``status`` (on every node)."""
        message = status.reasons[0]
        reasons = ((message, len(self.nodes)),)
        self.unschedulable.extend(
            Unschedulable(p.uid, message, reasons, p.namespace, p.name) for p in pods
        )

    # -- explaining ------------------------------------------------------------------------
    def explain(self) -> None:
        """Reasons for every pod left unplaced, judged on the state at the end of the plan
        (capacity only shrinks during a plan, so a pod that did not fit when its class was
        placed fits nowhere now either, and the message is true when the caller reads it)."""
        for shape, pods in self.failed:
            statuses: list[Status] = []
            for i, node in enumerate(self.nodes):
                status = check_node(shape, node, self.settings.extra_node_filters)
                if status.ok:
                    free = capacity_left(self.limits[i], self.model.usage[node.name])
                    status = check_capacity(shape, free)
                statuses.append(status)
            histogram = reason_histogram(statuses)
            message = unschedulable_message(len(self.nodes), histogram)
            reasons = tuple(histogram.items())
            self.unschedulable.extend(
                Unschedulable(p.uid, message, reasons, p.namespace, p.name) for p in pods
            )
