"""A node's image cache: pull latency by image size, a per-node pull parallelism, the
kubelet's image garbage collection, and the list the kubelet publishes in
``node.status.images`` (which schedulers use for locality).

One cache per node serves both the kubelet's pod starts and the node's CRI ImageService
(``cri.py``): an image pulled through CRI is present for the next pod start, and an image a
pod start pulled is listed by CRI ``ListImages`` — the two views cannot disagree. Concurrent
requests for the same absent image share one pull, as with containerd; all pulls of a node
share its parallelism.

Image GC follows the kubelet's policy: when the images use more than ``gc_high_percent`` of
the image disk (``disk_bytes``), unused images are removed, least recently used first, until
usage is under ``gc_low_percent`` (kubelet defaults 85 / 80). An image is in use while an
active pod of the node names it. GC runs after each completed pull (the kubelet runs it every
5 minutes and on disk pressure; after a pull is when usage grows, so the effect is the same
and deterministic for tests). ``disk_bytes: 0`` disables it.

``node.status.images`` lists at most ``status_max_images`` images, the largest first, as the
kubelet's ``nodeStatusMaxImages`` (50) does: small per-task images drop out of it, which is
why Sandman's node agent publishes what is ready on its node itself.
"""

from __future__ import annotations

import asyncio
import fnmatch
import hashlib
import time
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field

from simcluster.kubelet.runtime import RuntimeStartError

__all__ = ["ImageCache", "PullFailure", "PullSettings", "PullStats", "normalize_image"]


@dataclass(frozen=True, slots=True)
class PullSettings:
    base_s: float = 0.0  # per pull (resolve, unpack)
    bandwidth_bps: float = 0.0  # bytes/s; 0 = instant
    parallelism: int = (
        0  # pulls at once per node; 0 = unlimited (kubelet's serializeImagePulls=false)
    )
    default_size: int = 100 * 2**20
    sizes: Mapping[str, int] = field(default_factory=dict)  # image (as written) -> bytes
    #: Glob patterns (on the normalized name) of images whose pull fails: ErrImagePull, as
    #: for an image that does not exist. ``.invalid`` is reserved (RFC 2606), so it never
    #: names a real registry.
    unpullable: tuple[str, ...] = ("*.invalid/*",)
    #: Glob patterns -> size in bytes (after ``sizes``): "registry.local/task-*" -> 1 GiB.
    size_patterns: Mapping[str, int] = field(default_factory=dict)
    #: The node's image disk in bytes; 0 = unlimited (no image GC).
    disk_bytes: int = 0
    gc_high_percent: int = 85
    gc_low_percent: int = 80
    #: ``nodeStatusMaxImages``: images listed in node.status.images, largest first.
    status_max_images: int = 50

    def __post_init__(self) -> None:
        if not 0 <= self.gc_low_percent <= self.gc_high_percent <= 100:
            raise ValueError("image GC thresholds: 0 <= low <= high <= 100")

    def size_of(self, image: str) -> int:
        if image in self.sizes:
            return int(self.sizes[image])
        key = normalize_image(image)
        for pattern, size in self.size_patterns.items():
            if fnmatch.fnmatchcase(image, pattern) or fnmatch.fnmatchcase(key, pattern):
                return int(size)
        return int(self.default_size)

    def latency(self, image: str) -> float:
        transfer = self.size_of(image) / self.bandwidth_bps if self.bandwidth_bps else 0.0
        return self.base_s + transfer


def normalize_image(image: str) -> str:
    """``nginx:1.25`` -> ``docker.io/library/nginx:1.25`` (the name containerd reports)."""
    ref = image
    first = ref.split("/", 1)[0]
    if "/" not in ref:
        ref = f"docker.io/library/{ref}"
    elif "." not in first and ":" not in first and first != "localhost":
        ref = f"docker.io/{ref}"
    last = ref.rsplit("/", 1)[-1]
    if ":" not in last and "@" not in last:
        ref += ":latest"
    return ref


class PullFailure(RuntimeStartError):
    """A pull failed (ErrImagePull): the image does not exist, or a fault said so."""


class PullStats:
    """Cluster-wide pull accounting, shared by every node's cache: pulls per image, pulls of
    one image in flight at once (and the peak), images removed by GC. The burst benchmark
    reads them from /metrics; tests read them directly."""

    def __init__(
        self,
        on_pull: Callable[[str, int], None] | None = None,
        on_gc: Callable[[int], None] | None = None,
    ) -> None:
        self.pulls: dict[str, int] = {}
        self.in_flight: dict[str, int] = {}
        self.peak: dict[str, int] = {}
        self.gc_removed = 0
        self._on_pull = on_pull
        self._on_gc = on_gc

    def started(self, image: str) -> None:
        self.pulls[image] = self.pulls.get(image, 0) + 1
        now = self.in_flight[image] = self.in_flight.get(image, 0) + 1
        if now > self.peak.get(image, 0):
            self.peak[image] = now
        if self._on_pull is not None:
            self._on_pull(image, self.peak[image])

    def collected(self, count: int) -> None:
        self.gc_removed += count
        if count and self._on_gc is not None:
            self._on_gc(count)

    def ended(self, image: str) -> None:
        left = self.in_flight.get(image, 1) - 1
        if left:
            self.in_flight[image] = left
        else:
            self.in_flight.pop(image, None)


class ImageCache:
    def __init__(
        self,
        settings: PullSettings,
        preloaded: Iterable[str],
        on_change: Callable[[], None],
        *,
        in_use: Callable[[], Collection[str]] = frozenset,
        stats: PullStats | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.settings = settings
        self.present: dict[str, int] = {normalize_image(i): settings.size_of(i) for i in preloaded}
        self._aliases: dict[str, set[str]] = {normalize_image(i): {i} for i in preloaded}
        self._used: dict[str, float] = dict.fromkeys(self.present, clock())
        self._pulls: dict[str, asyncio.Task[None]] = {}
        self._sem = asyncio.Semaphore(settings.parallelism) if settings.parallelism else None
        self._on_change = on_change
        self._in_use = in_use
        self._clock = clock
        self.stats = stats or PullStats()
        #: Injected faults: glob pattern -> pulls left that fail (admin fault ``pull-fail``).
        self.fail_next: dict[str, int] = {}
        self.pulls_done = 0
        self.removed_by_gc: list[str] = []
        #: Changes whenever the set of present images changes (CRI caches its listing by it).
        self.version = 0

    def has(self, image: str) -> bool:
        return normalize_image(image) in self.present

    def touch(self, image: str) -> None:
        """A container started from ``image``: it is the most recently used."""
        key = normalize_image(image)
        if key in self.present:
            self._used[key] = self._clock()

    def used_bytes(self) -> int:
        return sum(self.present.values())

    async def ensure(self, image: str, policy: str) -> None:
        """What a pod start does: pull unless present (per the pull policy)."""
        key = normalize_image(image)
        if key in self.present:
            return  # "Always" with the image present: a digest check, modelled as free
        if policy == "Never":
            raise RuntimeStartError(
                "ErrImageNeverPull",
                f'Container image "{image}" is not present with pull policy of Never',
            )
        await self.pull(image)

    async def pull(self, image: str) -> str:
        """Pull ``image`` (shared with any pull of it already under way); its normalised
        name. Raises :class:`PullFailure` (reason ErrImagePull)."""
        key = normalize_image(image)
        if key in self.present:
            return key
        task = self._pulls.get(key)
        if task is None:
            task = asyncio.create_task(self._pull(image, key), name=f"pull {key}")
            self._pulls[key] = task
        await asyncio.shield(task)
        return key

    def _injected(self, key: str) -> bool:
        for pattern, left in list(self.fail_next.items()):
            if left > 0 and fnmatch.fnmatchcase(key, pattern):
                self.fail_next[pattern] = left - 1
                return True
        return False

    async def _pull(self, image: str, key: str) -> None:
        try:
            if self._sem is None:
                await self._transfer(image, key)
            else:
                async with self._sem:
                    await self._transfer(image, key)
            self.present[key] = self.settings.size_of(image)
            self._used[key] = self._clock()
            self._aliases.setdefault(key, set()).add(image)
            self.pulls_done += 1
            self.version += 1
            self.collect_garbage()
            self._on_change()
        finally:
            self._pulls.pop(key, None)

    async def _transfer(self, image: str, key: str) -> None:
        unpullable = any(fnmatch.fnmatchcase(key, p) for p in self.settings.unpullable)
        if unpullable or self._injected(key):
            await asyncio.sleep(self.settings.base_s)
            raise PullFailure("ErrImagePull", f'failed to pull and unpack image "{key}": not found')
        self.stats.started(key)
        try:
            await asyncio.sleep(self.settings.latency(image))
        finally:
            self.stats.ended(key)

    def remove(self, image: str) -> bool:
        """CRI RemoveImage: forget the image (a running container keeps its snapshot, as
        with containerd). False if it was not present."""
        key = normalize_image(image)
        if self.present.pop(key, None) is None:
            return False
        self._aliases.pop(key, None)
        self._used.pop(key, None)
        self.version += 1
        self._on_change()
        return True

    def collect_garbage(self) -> list[str]:
        """The kubelet's image GC: over the high threshold, remove unused images, least
        recently used first, down to the low threshold. Returns what it removed."""
        s = self.settings
        if s.disk_bytes <= 0 or self.used_bytes() * 100 <= s.gc_high_percent * s.disk_bytes:
            return []
        target = s.disk_bytes * s.gc_low_percent // 100
        in_use = {normalize_image(i) for i in self._in_use()}
        removed = []
        for key in sorted(self.present, key=lambda k: self._used.get(k, 0.0)):
            if self.used_bytes() <= target:
                break
            if key in in_use or key in self._pulls:
                continue
            self.present.pop(key)
            self._aliases.pop(key, None)
            self._used.pop(key, None)
            removed.append(key)
        self.version += bool(removed)
        self.stats.collected(len(removed))
        self.removed_by_gc.extend(removed)
        return removed

    def image_id(self, key: str) -> str:
        return "sha256:" + hashlib.sha256(key.encode()).hexdigest()

    def status_images(self) -> list[dict[str, object]]:
        """node.status.images: the ``status_max_images`` largest, as the kubelet lists them."""
        ranked = sorted(self.present.items(), key=lambda kv: (-kv[1], kv[0]))
        out = []
        for key, size in ranked[: self.settings.status_max_images]:
            names = [key, *sorted(a for a in self._aliases.get(key, ()) if a != key)]
            out.append({"names": names, "sizeBytes": size})
        return out

    async def close(self) -> None:
        for task in list(self._pulls.values()):
            task.cancel()
        await asyncio.gather(*self._pulls.values(), return_exceptions=True)
