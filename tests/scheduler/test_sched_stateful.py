"""A stateful property test: plans, binds, failures, expiry and foreign pods interleaved.

The machine plays controller and cluster at once. It keeps its own record of the truth
(which pods are bound where, which of our assignments are still only reserved) and checks,
after every step, that the model agrees with a recount of that truth and that no node is
ever committed beyond its allocatable CPU, memory or pod count.
"""

from __future__ import annotations

from typing import Any

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from scheduler import Scheduler, SchedulerSettings
from tests.support.pods import node_json, pod_json

NODES = {"a": ("2", "4Gi", "6"), "b": ("4", "8Gi", "10"), "c": ("1", "2Gi", "4")}
SIZES = [("250m", "512Mi"), ("500m", "1Gi"), ("1", "256Mi")]
CPU_M = {"250m": 250, "500m": 500, "1": 1000}
MEM_MI = {"512Mi": 512, "1Gi": 1024, "256Mi": 256}


class Cluster(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.s = Scheduler(
            SchedulerSettings(max_starting_per_node=3, bind_timeout_s=10.0, assume_ttl_s=4.0)
        )
        self.now = 0.0
        self.bound: dict[str, dict[str, Any]] = {}  # uid -> pod object as last sent
        self.reserved: dict[str, tuple[str, float]] = {}  # uid -> (node, deadline)
        self.sizes: dict[str, tuple[str, str]] = {}
        self.counter = 0
        self.cordoned: set[str] = set()

    @initialize()
    def nodes(self) -> None:
        for name, (cpu, mem, pods) in NODES.items():
            self.s.upsert_node(node_json(name, cpu, mem, pods))

    def _uid(self, prefix: str) -> str:
        self.counter += 1
        return f"{prefix}{self.counter}"

    def _used(self, node: str) -> tuple[int, int, int]:
        cpu = mem = count = 0
        for uid, obj in self.bound.items():
            if obj["spec"]["nodeName"] == node and obj["status"]["phase"] in ("Pending", "Running"):
                c, m = self.sizes[uid]
                cpu, mem, count = cpu + CPU_M[c], mem + MEM_MI[m], count + 1
        for uid, (n, _) in self.reserved.items():
            if n == node:
                c, m = self.sizes[uid]
                cpu, mem, count = cpu + CPU_M[c], mem + MEM_MI[m], count + 1
        return cpu, mem, count

    @rule(size=st.sampled_from(SIZES), count=st.integers(1, 12))
    def plan(self, size: tuple[str, str], count: int) -> None:
        pods = []
        for _ in range(count):
            uid = self._uid("s")
            self.sizes[uid] = size
            pods.append(pod_json(uid, *size))
        plan = self.s.plan(pods, now=self.now)
        assert len(plan.assignments) + len(plan.unschedulable) == count
        assert not {a.node for a in plan.assignments} & self.cordoned
        for a in plan.assignments:
            self.reserved[a.uid] = (a.node, self.now + 10.0)

    @precondition(lambda self: self.reserved)
    @rule(data=st.data(), running=st.booleans())
    def bind_observed(self, data: st.DataObject, running: bool) -> None:
        uid = data.draw(st.sampled_from(sorted(self.reserved)))
        node, _ = self.reserved.pop(uid)
        phase = "Running" if running else "Pending"
        obj = pod_json(uid, *self.sizes[uid], node=node, phase=phase)
        self.bound[uid] = obj
        self.s.upsert_pod(obj)

    @precondition(lambda self: self.reserved)
    @rule(data=st.data())
    def bind_succeeded(self, data: st.DataObject) -> None:
        """The bind call returned 201; the watch has not shown the pod yet."""
        uid = data.draw(st.sampled_from(sorted(self.reserved)))
        assert self.s.finish_binding([uid], self.now) == 1
        self.reserved[uid] = (self.reserved[uid][0], self.now + 4.0)

    @precondition(lambda self: self.reserved)
    @rule(data=st.data())
    def bind_failed(self, data: st.DataObject) -> None:
        uid = data.draw(st.sampled_from(sorted(self.reserved)))
        del self.reserved[uid]
        assert self.s.forget(uid)
        assert not self.s.forget(uid)

    @rule(seconds=st.sampled_from([1.0, 5.0, 11.0]))
    def time_passes(self, seconds: float) -> None:
        self.now += seconds
        expired = self.s.expire(self.now)
        due = {u for u, (_, deadline) in self.reserved.items() if deadline <= self.now}
        assert set(expired) == due
        for uid in due:
            del self.reserved[uid]

    @precondition(lambda self: self.bound)
    @rule(data=st.data(), phase=st.sampled_from(["Running", "Succeeded", "Failed", "gone"]))
    def pod_changes(self, data: st.DataObject, phase: str) -> None:
        uid = data.draw(st.sampled_from(sorted(self.bound)))
        obj = self.bound[uid]
        if phase == "gone":
            del self.bound[uid]
            self.s.delete_pod(obj)
            return
        if obj["status"]["phase"] in ("Succeeded", "Failed"):
            return  # terminal phases are final in Kubernetes; only deletion follows
        obj = pod_json(uid, *self.sizes[uid], node=obj["spec"]["nodeName"], phase=phase)
        self.bound[uid] = obj
        self.s.upsert_pod(obj)

    @rule(node=st.sampled_from(sorted(NODES)), size=st.sampled_from(SIZES))
    def foreign_pod_admitted(self, node: str, size: tuple[str, str]) -> None:
        """Another scheduler binds a pod; the kubelet admits it only if it fits."""
        cpu, mem, count = self._used(node)
        n_cpu, n_mem, n_pods = NODES[node]
        alloc_cpu = int(float(n_cpu) * 1000)
        alloc_mem = int(n_mem[:-2]) * 1024
        if (
            cpu + CPU_M[size[0]] > alloc_cpu
            or mem + MEM_MI[size[1]] > alloc_mem
            or count + 1 > int(n_pods)
        ):
            return
        uid = self._uid("f")
        self.sizes[uid] = size
        obj = pod_json(uid, *size, node=node, phase="Running")
        self.bound[uid] = obj
        self.s.upsert_pod(obj)

    @rule(node=st.sampled_from(sorted(NODES)), cordon=st.booleans())
    def node_updated(self, node: str, cordon: bool) -> None:
        """A Node update (cordon/uncordon) replaces the node's object, not its usage."""
        self.cordoned.discard(node)
        if cordon:
            self.cordoned.add(node)
        self.s.upsert_node(node_json(node, *NODES[node], unschedulable=cordon))

    @invariant()
    def never_overcommitted_and_model_matches_a_recount(self) -> None:
        for node, (n_cpu, n_mem, n_pods) in NODES.items():
            cpu, mem, count = self._used(node)
            usage = self.s.usage(node)
            assert usage.requested.cpu == cpu * 1
            assert usage.requested.memory == mem * 2**20
            assert usage.pods == count
            assert usage.assumed == sum(1 for n, _ in self.reserved.values() if n == node)
            assert cpu <= float(n_cpu) * 1000
            assert mem <= int(n_mem[:-2]) * 1024
            assert count <= int(n_pods)


Cluster.TestCase.settings = settings(max_examples=40, stateful_step_count=30, deadline=None)
TestCluster = Cluster.TestCase
