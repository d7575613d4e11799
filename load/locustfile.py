"""Locust users for Sandman's trainer API (the facade), with burst / churn / step shapes.

Why locust: it is what RL infrastructure teams already run; its CSV output and web UI make
the facade's latencies comparable across changes. Run it headless (docs/load.md):

    locust -f load/locustfile.py --headless --host http://127.0.0.1:PORT \\
        --shape burst --shape-users 100 --shape-duration 120 --csv build/locust/burst \\
        TrainerStepUser

Users (pick one class on the command line, or both by weight):

- ``RolloutUser``: one rollout at a time — create a sandbox, wait until Ready, K tool calls
  with think time (exec, file write + read, session commands), release. Steady churn.
- ``TrainerStepUser``: one training step — a batch create of B sandboxes (as a trainer
  would), every rollout concurrently (one greenlet each), then release by owner.

Requests are grouped by name (``/v1/sandboxes/[id]/exec``), never by id. Time to Ready is
reported as its own request (type ``SANDBOX``, name ``time-to-ready``: create sent → Ready
seen), so its percentiles sit next to the HTTP ones. When the run ends, thresholds
(``--max-fail-ratio``, ``--max-ready-p95-ms``) set a non-zero exit code if they fail.
"""

from __future__ import annotations

import random
import time
import uuid
from typing import Any

import gevent
from gevent.pool import Group
from locust import FastHttpUser, LoadTestShape, between, events, task
from locust.env import Environment
from locust.exception import StopUser

from load.shapes import make_shape
from sandman.wire.facade import DEFAULT_CLASS, DEFAULT_TTL_S

__all__ = ["RolloutUser", "SandmanShape", "TrainerStepUser"]

SB = "/v1/sandboxes"
DONE = frozenset({"ready", "failed", "terminated"})
#: Environment attribute counting TrainerStepUsers that ran their ``--steps``.
FINISHED = "sandman_users_finished"


def _finished(environment: Environment) -> int:
    return int(getattr(environment, FINISHED, 0))


@events.init_command_line_parser.add_listener
def _options(parser: Any) -> None:
    g = parser.add_argument_group("Sandman")
    g.add_argument("--sandman-token", env_var="SANDMAN_TOKEN", default="", help="tenant token")
    g.add_argument("--image", default="registry.bench/task:1", help="sandbox image")
    g.add_argument("--sandbox-class", default=DEFAULT_CLASS)
    g.add_argument("--tool-calls", type=int, default=5, help="tool calls per rollout")
    g.add_argument("--think-time", type=float, default=1.0, help="mean seconds between calls")
    g.add_argument("--batch", type=int, default=20, help="sandboxes per TrainerStepUser step")
    g.add_argument("--steps", type=int, default=0, help="steps per TrainerStepUser (0: no end)")
    g.add_argument("--ready-timeout", type=float, default=300.0, help="seconds")
    g.add_argument("--shape", default="none", help="burst, steady-churn, step or none")
    g.add_argument("--shape-users", type=int, default=100, help="peak users of the shape")
    g.add_argument("--shape-duration", type=float, default=120.0, help="seconds")
    g.add_argument("--max-fail-ratio", type=float, default=0.01)
    g.add_argument("--max-ready-p95-ms", type=float, default=0.0, help="0: no threshold")


@events.quitting.add_listener
def _thresholds(environment: Environment, **_kw: Any) -> None:
    """A failed threshold makes locust exit non-zero (CI)."""
    o = environment.parsed_options
    if o is None:
        return
    stats = environment.stats
    failed = []
    if stats.total.fail_ratio > o.max_fail_ratio:
        failed.append(f"fail ratio {stats.total.fail_ratio:.3f} > {o.max_fail_ratio}")
    ready = stats.get("time-to-ready", "SANDBOX")
    if o.max_ready_p95_ms and ready.num_requests:
        p95 = ready.get_response_time_percentile(0.95)
        if p95 > o.max_ready_p95_ms:
            failed.append(f"time-to-ready p95 {p95:.0f} ms > {o.max_ready_p95_ms:.0f} ms")
    if failed:
        print("thresholds FAILED: " + "; ".join(failed))
        environment.process_exit_code = 1


class _SandmanUser(FastHttpUser):
    abstract = True
    connection_timeout = 30.0
    network_timeout = 330.0  # a ready-wait holds the request up to its timeout_s

    def on_start(self) -> None:
        o = self.environment.parsed_options
        self.o = o
        self.auth = {"Authorization": f"Bearer {o.sandman_token}"} if o else {}
        self.owner = f"locust-{uuid.uuid4().hex[:12]}"

    def spec(self) -> dict[str, Any]:
        return {
            "image": self.o.image,
            "class": self.o.sandbox_class,
            "owner": self.owner,
            "ttl_s": DEFAULT_TTL_S,
            "idle_timeout_s": None,
            "env": {},
            "labels": {"load": "locust"},
        }

    def call(self, method: str, path: str, name: str, **kw: Any) -> dict[str, Any] | None:
        """One request, grouped under ``name``; the decoded JSON body, or None on failure."""
        with self.client.request(
            method, path, name=name, headers=self.auth, catch_response=True, **kw
        ) as resp:
            if resp.status_code >= 400 or resp.status_code == 0:
                resp.failure(f"HTTP {resp.status_code}: {(resp.text or '')[:200]}")
                return None
            try:
                body = resp.json() if resp.text else {}
            except ValueError:
                body = {}
            return body if isinstance(body, dict) else {}

    def wait_ready(self, sid: str, since: float) -> bool:
        """Poll with the facade's long wait; report time-to-ready as its own request."""
        deadline = since + self.o.ready_timeout
        state = "pending"
        while time.monotonic() < deadline:
            sb = self.call("GET", f"{SB}/{sid}?wait=ready&timeout_s=30", f"{SB}/[id]?wait=ready")
            if sb is None:
                break
            state = sb.get("state", "?")
            if state in DONE:
                break
        ok = state == "ready"
        self.environment.events.request.fire(
            request_type="SANDBOX",
            name="time-to-ready",
            response_time=(time.monotonic() - since) * 1000,
            response_length=0,
            exception=None if ok else RuntimeError(f"sandbox {state}"),
            context={},
        )
        return ok

    def think(self) -> None:
        gevent.sleep(random.uniform(0.5, 1.5) * self.o.think_time)

    def tool_calls(self, sid: str) -> None:
        """K agent-like calls: exec, file write + read, session commands, in rotation."""
        base, named = f"{SB}/{sid}", f"{SB}/[id]"
        self.call("POST", f"{base}/sessions", f"{named}/sessions", json={"name": "agent"})
        for k in range(self.o.tool_calls):
            self.think()
            kind = k % 3
            if kind == 0:
                cmd = {"command": "echo hello && ls / | head -3"}
                self.call("POST", f"{base}/exec", f"{named}/exec", json=cmd)
            elif kind == 1:
                path = f"{base}/files?path=/tmp/notes-{k}.txt"
                self.call("PUT", path, f"{named}/files [PUT]", data=b"x" * 1024)
                self.call("GET", path, f"{named}/files [GET]")
            else:
                run = {"command": f"cd /tmp && export STEP={k} && echo $STEP", "timeout_s": 30}
                self.call("POST", f"{base}/sessions/agent/run", f"{named}/sessions/run", json=run)

    def rollout(self, sid: str, since: float) -> None:
        if self.wait_ready(sid, since):
            self.tool_calls(sid)


class RolloutUser(_SandmanUser):
    """One sandbox at a time: create → Ready → K tool calls → release."""

    wait_time = between(0.5, 2.0)

    @task
    def one_rollout(self) -> None:
        since = time.monotonic()
        sb = self.call("POST", SB, SB, json=self.spec())
        if sb is None:
            return
        try:
            self.rollout(sb["id"], since)
        finally:
            self.call("DELETE", f"{SB}/{sb['id']}", f"{SB}/[id]")


class TrainerStepUser(_SandmanUser):
    """One training step: batch create → every rollout concurrently → release by owner."""

    wait_time = between(5.0, 10.0)

    @task
    def step(self) -> None:
        since = time.monotonic()
        body = {"spec": self.spec(), "count": self.o.batch}
        res = self.call("POST", "/v1/batches", "/v1/batches", json=body)
        if res is None:
            return
        for f in res.get("failed") or []:
            self.environment.events.request.fire(
                request_type="SANDBOX",
                name="batch item failed",
                response_time=0,
                response_length=0,
                exception=RuntimeError(f.get("reason", "?")),
                context={},
            )
        group = Group()
        for sb in res.get("sandboxes") or []:
            group.spawn(self.rollout, sb["id"], since)
        group.join()
        self.call("DELETE", f"{SB}?owner={self.owner}", f"{SB}?owner=[owner]")
        self.steps_done += 1
        if self.o.steps and self.steps_done >= self.o.steps:
            setattr(self.environment, FINISHED, _finished(self.environment) + 1)
            raise StopUser()

    def on_start(self) -> None:
        super().on_start()
        self.steps_done = 0


class SandmanShape(LoadTestShape):
    """``--shape burst|steady-churn|step`` (``none``: locust's own -u/-r/--run-time)."""

    use_common_options = True  # -u/-r/-t/--run-time keep working with --shape none

    def tick(self) -> tuple[int, float] | None:
        o = self.runner.environment.parsed_options if self.runner else None
        if o is None or o.shape == "none":
            # A shape class replaces locust's own run-time timer: honour -t here.
            if o is None or (o.run_time and self.get_run_time() >= o.run_time):
                return None
            users = o.num_users or 1
            if o.steps and self.runner and _finished(self.runner.environment) >= users:
                return None  # every TrainerStepUser ran its --steps
            return users, o.spawn_rate
        shape = make_shape(o.shape, o.shape_users, o.shape_duration)
        return shape.tick(self.get_run_time())
