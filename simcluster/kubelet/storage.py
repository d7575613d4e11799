"""Ephemeral-storage eviction: a disk filler in one sandbox is evicted, not the node filled.

Why: a sandbox's writable layer and emptyDir volumes live on the node's disk. A real kubelet's
eviction manager measures each pod's local ephemeral storage (the containers' writable
layers, their logs, its emptyDir volumes) every housekeeping period and evicts a pod whose
usage exceeds the sum of its containers' ``ephemeral-storage`` limits: the pod turns
Failed with reason ``Evicted`` and upstream's message, its containers are stopped and their
layers removed, and the node's disk is free again. This module is that check for runtimes
that can measure usage (:class:`StorageMeter`: the ``cri`` runtime reads CRI
``ContainerStats``' writable layer and sizes the pod's emptyDir directories); the
``virtual`` and ``process`` runtimes have no writable layer and are not checked.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import Awaitable, Callable, Iterable
from pathlib import Path
from typing import Protocol, runtime_checkable

from simcluster.kubelet.runtime import Sandbox

__all__ = [
    "StorageMeter",
    "directory_bytes",
    "eviction_message",
    "quantity",
    "storage_eviction_loop",
]

log = logging.getLogger(__name__)

_BINARY = (("Ti", 1 << 40), ("Gi", 1 << 30), ("Mi", 1 << 20), ("Ki", 1 << 10))


@runtime_checkable
class StorageMeter(Protocol):
    async def storage_used(self, sandbox: Sandbox) -> int | None:
        """Bytes of local ephemeral storage the pod uses now; None if unknown."""
        ...


def quantity(n: int) -> str:
    """``n`` bytes as the API server would print the summed quantity (``10Mi``)."""
    for suffix, unit in _BINARY:
        if n % unit == 0:
            return f"{n // unit}{suffix}"
    return str(n)


def eviction_message(limit_bytes: int) -> str:
    """Upstream's message (eviction_manager/helpers.go, ``podEphemeralStorageMessageFmt``)."""
    total = quantity(limit_bytes)
    return f"Pod ephemeral local storage usage exceeds the total limit of containers {total}. "


def directory_bytes(root: Path) -> int:
    """Bytes held by the files under ``root`` (allocated blocks, as ``du`` counts)."""
    total = 0
    for directory, _dirs, files in os.walk(root):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(directory, name)).st_blocks * 512
    return total


async def storage_eviction_loop(
    meter: StorageMeter,
    sandboxes: Callable[[], Iterable[Sandbox]],
    evict: Callable[[str, str, str], Awaitable[bool]],
    interval_s: float,
) -> None:
    """Every ``interval_s``: evict each pod whose usage exceeds its limit."""
    while True:
        await asyncio.sleep(interval_s)
        for sandbox in list(sandboxes()):
            limit = sandbox.storage_limit_bytes
            if not limit or sandbox.virtual:
                continue
            try:
                used = await meter.storage_used(sandbox)
            except OSError:  # a pod going away mid-measurement: the next round decides
                log.debug("measuring %s failed", sandbox.name, exc_info=True)
                continue
            if used is not None and used > limit:
                name = f"{sandbox.namespace}/{sandbox.name}"
                log.info("evicting %s: %d bytes used, limit %d", name, used, limit)
                await evict(sandbox.namespace, sandbox.name, eviction_message(limit))
