"""A node's image cache: pull latency by image size, a per-node pull parallelism, and the
list the kubelet publishes in ``node.status.images`` (which schedulers use for locality).

Concurrent pods wanting the same absent image share one pull, as with containerd.
"""

from __future__ import annotations

import asyncio
import fnmatch
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from simcluster.kubelet.runtime import RuntimeStartError

__all__ = ["ImageCache", "PullSettings", "normalize_image"]


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

    def size_of(self, image: str) -> int:
        return int(self.sizes.get(image, self.default_size))

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


class ImageCache:
    def __init__(
        self, settings: PullSettings, preloaded: Iterable[str], on_change: Callable[[], None]
    ) -> None:
        self.settings = settings
        self.present: dict[str, int] = {normalize_image(i): settings.size_of(i) for i in preloaded}
        self._aliases: dict[str, set[str]] = {normalize_image(i): {i} for i in preloaded}
        self._pulls: dict[str, asyncio.Task[None]] = {}
        self._sem = asyncio.Semaphore(settings.parallelism) if settings.parallelism else None
        self._on_change = on_change
        self.pulls_done = 0

    def has(self, image: str) -> bool:
        return normalize_image(image) in self.present

    async def ensure(self, image: str, policy: str) -> None:
        key = normalize_image(image)
        if key in self.present and policy != "Always":
            return
        if key in self.present:
            return  # "Always" with the image present: a digest check, modelled as free
        if policy == "Never":
            raise RuntimeStartError(
                "ErrImageNeverPull",
                f'Container image "{image}" is not present with pull policy of Never',
            )
        if any(fnmatch.fnmatchcase(key, pattern) for pattern in self.settings.unpullable):
            await asyncio.sleep(self.settings.base_s)
            raise RuntimeStartError(
                "ErrImagePull",
                f'failed to pull and unpack image "{key}": not found',
            )
        task = self._pulls.get(key)
        if task is None:
            task = asyncio.create_task(self._pull(image, key), name=f"pull {key}")
            self._pulls[key] = task
        await asyncio.shield(task)

    async def _pull(self, image: str, key: str) -> None:
        try:
            if self._sem is None:
                await asyncio.sleep(self.settings.latency(image))
            else:
                async with self._sem:
                    await asyncio.sleep(self.settings.latency(image))
            self.present[key] = self.settings.size_of(image)
            self._aliases.setdefault(key, set()).add(image)
            self.pulls_done += 1
            self._on_change()
        finally:
            self._pulls.pop(key, None)

    def status_images(self) -> list[dict[str, object]]:
        out = []
        for key, size in sorted(self.present.items()):
            names = [key, *sorted(a for a in self._aliases.get(key, ()) if a != key)]
            out.append({"names": names, "sizeBytes": size})
        return out

    async def close(self) -> None:
        for task in list(self._pulls.values()):
            task.cancel()
        await asyncio.gather(*self._pulls.values(), return_exceptions=True)
