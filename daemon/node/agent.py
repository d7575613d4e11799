"""The node agent's core: plan in, pulls out, ready set published.

One :class:`NodeAgent` per node. Its inputs are the plan (the ``sandman.io/prepare``
annotation the leading controller writes on this node's Lease, read from a watch of that one
object) and the runtime's images (CRI ``ListImages``: on every change and every
``reconcile_interval_s``, which is how images the kubelet's GC removed, or pods pulled, are
noticed). Each reconcile:

1. **pulls** planned images that are missing, at most ``pull_parallelism`` at once; a
   failure is retried with the one backoff helper (equal jitter, capped) and reported once
   per failure streak as a Warning Event on the Node (a refused one is held and sent again
   on the renewal cadence: daemon/node/events.py), and in the published failures;
2. **re-pulls** planned images that were ready and are gone (image GC), counted apart;
3. **releases** images it pulled itself (recorded in ``<state_dir>/pulled.json``, so a
   restart does not forget) once they have been unplanned for ``release_after_s`` — never
   an image it did not pull;
4. **publishes** every image present on the node, the failures and the bundle digest
   through :class:`~daemon.node.lease.LeasePublisher` (its write bounds apply), and sends
   the held Events if their retry is due.

Every API call goes through :class:`~daemon.node.access.ApiAccess`, which counts it and
holds a 403 until a call of that kind works again (the agent's ``/readyz`` fails meanwhile):
a refused Lease write, Event or plan read is reported, and the loop carries on; each is
tried again on its own (the next due Lease write, the held Event's retry, the informer's
relist), so restoring the rule makes the agent ready again without a further failure.

The core takes its clients from outside, so a test or devstack can run many cores in one
process (docs/node-agent.md, "Running at scale").
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import random
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from daemon.node.access import ApiAccess
from daemon.node.bundle import BundleError, sync_bundle
from daemon.node.cri import CriError, ImageClient
from daemon.node.events import EventRecorder
from daemon.node.hardening import CHECKS, check_kubelet_config
from daemon.node.lease import LeasePublisher, Published
from daemon.node.metrics import AgentMetrics
from daemon.node.settings import AgentSettings
from kube.cache import Obj
from kube.errors import Forbidden
from kube.informer import Handlers, Informer
from kube.light import LightClient
from kube.preparation_contract import ANNOTATION_PREPARE, decode_images
from kube.resources import EVENTS, LEASES
from kube.times import format_time

__all__ = ["NodeAgent"]

#: Where Events about a Node go: a core/v1 Event's namespace must match its involved
#: object's, and a cluster-scoped object's Events live in "default" (the API server refuses
#: them anywhere else; the kubelet writes its node Events there too).
NODE_EVENTS_NAMESPACE = "default"

log = logging.getLogger(__name__)


class NodeAgent:
    def __init__(
        self,
        settings: AgentSettings,
        client: LightClient,
        images: ImageClient,
        metrics: AgentMetrics,
        *,
        clock: Callable[[], float] = time.monotonic,
        rng: random.Random | None = None,
    ) -> None:
        if not settings.node_name:
            raise ValueError("the node agent needs its node's name (--node-name, $NODE_NAME)")
        self.settings = settings
        self.client = ApiAccess(client, metrics, settings.node_name)
        self.images = images
        self.metrics = metrics
        self.namespace = settings.namespace or client.namespace
        self.publisher = LeasePublisher(settings, self.client, self.namespace, metrics, clock=clock)
        self.lease = Informer(
            self.client,
            LEASES,
            namespace=self.namespace,
            field_selector=f"metadata.name={self.publisher.name}",
            name=f"lease {settings.node_name}",
        )
        self.lease.add_handler(Handlers(add=self._lease_seen, update=self._lease_changed))
        self._clock = clock
        self._rng = rng or random.Random()
        self.events = EventRecorder(
            self._create_event, settings, metrics, clock=clock, rng=self._rng
        )
        self._wake = asyncio.Event()
        self.plan: frozenset[str] = frozenset()
        self.present: frozenset[str] = frozenset()
        self.inflight: set[str] = set()
        self.failures: dict[str, tuple[str, str]] = {}
        self._attempts: dict[str, int] = {}
        self._retry_at: dict[str, float] = {}
        self._unplanned_since: dict[str, float] = {}
        self._was_ready: set[str] = set()
        self.bundle = ""
        self.pulled: set[str] = self._load_pulled()
        #: The failed hardening checks of the node's kubelet config (hardening.py), as last
        #: reported; None before the first check (or with no --kubelet-config).
        self.unhardened: dict[str, str] | None = None
        self.last_reconcile = 0.0
        self.reconciles = 0
        self.repulls = 0
        self._tasks: set[asyncio.Task[None]] = set()

    # --- the plan -----------------------------------------------------------------------
    def _lease_seen(self, lease: Obj) -> None:
        self._take_plan(lease)

    def _lease_changed(self, _old: Obj, new: Obj) -> None:
        self._take_plan(new)

    def _take_plan(self, lease: Obj) -> None:
        annotations = (lease.get("metadata") or {}).get("annotations") or {}
        plan = decode_images(annotations.get(ANNOTATION_PREPARE))
        if plan != self.plan:
            self.plan = plan
            self.metrics.planned.set(len(plan))
            self._wake.set()

    # --- running ------------------------------------------------------------------------
    async def run(self) -> None:
        # Refused: held (and /readyz fails) until a flush takes the Lease over; other errors
        # at start end the process, as a DaemonSet's restart is the better retry.
        with contextlib.suppress(Forbidden):
            await self.publisher.ensure()
        async with asyncio.TaskGroup() as tg:
            tg.create_task(self.lease.run())
            if self.settings.bundle_source:
                tg.create_task(self._bundle_loop())
            tg.create_task(self._loop())

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _loop(self) -> None:
        try:
            while True:
                self._wake.clear()
                await self.reconcile()
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(self._sleep_for()):
                        await self._wake.wait()
        finally:
            await self.close()

    def _sleep_for(self) -> float:
        now = self._clock()
        # +-20% jitter: agents started together (a DaemonSet rollout, a simulated cluster)
        # do not list their runtimes, or renew their Leases, in lockstep.
        interval = self.settings.reconcile_interval_s * self._rng.uniform(0.8, 1.2)
        waits = [interval, self.publisher.due_in(), self.events.due_in()]
        waits += [at - now for img, at in self._retry_at.items() if img in self.plan]
        release = self.settings.release_after_s
        waits += [since + release - now for since in self._unplanned_since.values()]
        return max(0.05, min(waits))

    async def reconcile(self) -> None:
        """One pass: list, pull, release, publish."""
        try:
            listed = await self.images.list_images()
        except CriError as e:
            self.metrics.errors.labels("cri").inc()
            log.warning("%s: ListImages failed: %s", self.settings.node_name, e)
        else:
            self.present = frozenset(t for img in listed for t in img.tags)
            self.last_reconcile = self._clock()
        self.reconciles += 1
        await self._check_hardening()
        self.metrics.ready.set(len(self.present))
        self._start_pulls()
        await self._release()
        self.failures = {i: f for i, f in self.failures.items() if i in self.plan}
        self.metrics.failing.set(len(self.failures))
        self.publisher.offer(Published.build(self.present, self.failures, self.plan, self.bundle))
        await self.publisher.flush()
        await self.events.retry()

    def _start_pulls(self) -> None:
        now = self._clock()
        missing = sorted(self.plan - self.present - self.inflight)
        for image in missing:
            if len(self.inflight) >= self.settings.pull_parallelism:
                break
            if self._retry_at.get(image, 0.0) > now:
                continue
            if image in self._was_ready:  # it was ready while planned: the image GC took it
                self.metrics.repulls.inc()
                self.repulls += 1
                self._was_ready.discard(image)
            self.inflight.add(image)
            self._spawn(self._pull(image), f"pull {image}")
        self._was_ready |= self.plan & self.present
        self._was_ready &= self.plan
        for image in list(self._retry_at):
            if image not in self.plan:  # unplanned: forget its failures
                self._retry_at.pop(image)
                self._attempts.pop(image, None)

    def _spawn(self, coro: Any, name: str) -> None:
        task = asyncio.create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _pull(self, image: str) -> None:
        self.metrics.pulls_in_flight.inc()
        start = self._clock()
        try:
            await self.images.pull(image, self.settings.pull_timeout_s)
        except CriError as e:
            self.metrics.pulls.labels("error").inc()
            attempt = self._attempts[image] = self._attempts.get(image, 0) + 1
            delay = self.settings.backoff.delay(attempt, None, self._rng)
            self._retry_at[image] = self._clock() + delay
            first = image not in self.failures
            self.failures[image] = (e.reason, e.details)
            log.info("%s: pull of %s failed (%s), retry in %.1f s", self._node, image, e, delay)
            if first:
                self._spawn(self._event(image, e, attempt, delay), f"event {image}")
        else:
            self.metrics.pulls.labels("ok").inc()
            self.metrics.pull_seconds.observe(self._clock() - start)
            self.failures.pop(image, None)
            self._attempts.pop(image, None)
            self._retry_at.pop(image, None)
            self.present = self.present | {image}
            if image not in self.pulled:
                self.pulled.add(image)
                self._save_pulled()
        finally:
            self.metrics.pulls_in_flight.dec()
            self.inflight.discard(image)
            self._wake.set()

    async def _release(self) -> None:
        now = self._clock()
        for image in list(self._unplanned_since):
            if image in self.plan:
                del self._unplanned_since[image]
        for image in sorted(self.pulled - self.plan - self.inflight):
            since = self._unplanned_since.setdefault(image, now)
            if now - since < self.settings.release_after_s:
                continue
            try:
                if image in self.present:
                    await self.images.remove(image)
                    self.metrics.removed.inc()
            except CriError as e:
                self.metrics.errors.labels("cri").inc()
                log.warning("%s: RemoveImage %s failed: %s", self._node, image, e)
                continue
            self.present = self.present - {image}
            self.pulled.discard(image)
            self._unplanned_since.pop(image, None)
            self._save_pulled()

    @property
    def _node(self) -> str:
        return self.settings.node_name

    # --- events -------------------------------------------------------------------------
    async def _event(self, image: str, err: CriError, attempt: int, delay: float) -> None:
        message = (
            f"preparing image {image} failed (attempt {attempt}): {err.code}: "
            f"{err.details[:400]}; retrying in {delay:.0f} s"
        )
        await self.events.record(self._node_event("ImagePrepareFailed", message))

    async def _check_hardening(self) -> None:
        """Check the kubelet config (each pass: an operator fixing it clears the gauge);
        one Warning Event whenever the set of failures changes to a non-empty one."""
        path = self.settings.kubelet_config
        if not path:
            return
        try:
            text: str | None = Path(path).read_text()
        except OSError:
            text = None
        failed = check_kubelet_config(text)
        for check in CHECKS:
            self.metrics.unhardened.labels(check).set(1 if check in failed else 0)
        if failed == self.unhardened:
            return
        self.unhardened = failed
        if failed:
            log.warning("%s is not hardened: %s", self._node, "; ".join(failed.values()))
            await self.events.record(self._node_event("NodeNotHardened", _describe(failed)))

    def _node_event(self, reason: str, message: str) -> dict[str, Any]:
        now = format_time()
        component = self.settings.component
        return {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"generateName": f"{self._node}.", "namespace": NODE_EVENTS_NAMESPACE},
            "involvedObject": {"apiVersion": "v1", "kind": "Node", "name": self._node},
            "reason": reason,
            "message": message,
            "type": "Warning",
            "source": {"component": component, "host": self._node},
            "reportingComponent": component,
            "reportingInstance": self._node,
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }

    async def _create_event(self, body: dict[str, Any]) -> None:
        await self.client.create(EVENTS, body, NODE_EVENTS_NAMESPACE)

    # --- the bundle ---------------------------------------------------------------------
    async def _bundle_loop(self) -> None:
        s = self.settings
        while True:
            try:
                digest, copied = await asyncio.to_thread(
                    sync_bundle, Path(s.bundle_source), Path(s.bundle_root), s.bundle_keep
                )
            except BundleError as e:
                self.metrics.errors.labels("bundle").inc()
                log.warning("%s: %s", self._node, e)
            else:
                if copied:
                    self.metrics.bundle_syncs.inc()
                if digest != self.bundle:
                    self.bundle = digest
                    self._wake.set()
            await asyncio.sleep(s.bundle_check_interval_s)

    # --- what it pulled -----------------------------------------------------------------
    def _state_file(self) -> Path | None:
        if not self.settings.state_dir:
            return None
        return Path(self.settings.state_dir) / f"pulled-{self._node}.json"

    def _load_pulled(self) -> set[str]:
        path = self._state_file()
        if path is None or not path.exists():
            return set()
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError) as e:
            log.warning("%s: ignoring unreadable %s: %s", self._node, path, e)
            return set()
        return {i for i in data if isinstance(i, str)} if isinstance(data, list) else set()

    def _save_pulled(self) -> None:
        path = self._state_file()
        if path is None:
            return
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(".tmp")
            tmp.write_text(json.dumps(sorted(self.pulled)))
            tmp.replace(path)
        except OSError as e:
            self.metrics.errors.labels("state").inc()
            log.warning("%s: cannot record pulled images in %s: %s", self._node, path, e)


def _describe(failed: dict[str, str]) -> str:
    """The Event's message: what fails, and where the required settings are documented."""
    found = "; ".join(f"{check}: {what}" for check, what in failed.items())
    return f"{found} (required node settings: docs/operator-guide.md, 'Node settings')"[:1000]
