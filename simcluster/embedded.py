"""Run a simulated cluster on a background thread with its own event loop.

Synchronous callers (the official ``kubernetes`` client, ``kubectl`` via subprocess, tests of
other components, the CLI) need the server to keep serving while they block; a dedicated
thread and loop gives them that without touching their own event loop.
"""

from __future__ import annotations

import asyncio
import tempfile
import threading
from collections.abc import Awaitable, Callable
from concurrent.futures import Future
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar

from simcluster.apiserver.http import ApiServer, ServerSettings
from simcluster.cluster import Cluster, ClusterSettings

__all__ = ["EmbeddedCluster"]

T = TypeVar("T")


class EmbeddedCluster:
    """``with EmbeddedCluster() as c: ... c.kubeconfig ...`` — a cluster on a thread.

    ``settings`` may be just ``ServerSettings`` (an API server, no nodes) or a full
    ``ClusterSettings`` (nodes, kubelets, runtime, ...)."""

    def __init__(
        self, settings: ServerSettings | ClusterSettings | None = None, workdir: Path | None = None
    ) -> None:
        if isinstance(settings, ServerSettings):
            settings = ClusterSettings(server=settings)
        self.settings = settings or ClusterSettings()
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        if workdir is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="simcluster-")
            workdir = Path(self._tmp.name)
        self.workdir = workdir
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self.loop.run_forever, name="simcluster", daemon=True
        )
        self.cluster: Cluster | None = None
        self.server: ApiServer | None = None
        self.kubeconfig = workdir / "kubeconfig"

    def call(self, fn: Callable[[], Awaitable[T]], timeout: float = 30.0) -> T:
        """Run a coroutine on the cluster's loop and wait for its result."""
        fut: Future[T] = asyncio.run_coroutine_threadsafe(_await(fn), self.loop)
        return fut.result(timeout)

    def start(self) -> EmbeddedCluster:
        self._thread.start()

        async def boot() -> Cluster:
            cluster = Cluster(self.settings, self.workdir)
            await cluster.start()
            return cluster

        try:
            self.cluster = self.call(boot, timeout=300)
        except BaseException:
            self.stop()
            raise
        self.server = self.cluster.server
        return self

    def stop(self) -> None:
        if self._thread.is_alive():
            if self.cluster is not None:
                self.call(self.cluster.stop)
            self.call(_drain)
            self.call(self.loop.shutdown_asyncgens)
        self.cluster = self.server = None
        if self._thread.is_alive():
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(10)
        if not self.loop.is_running() and not self.loop.is_closed():
            self.loop.close()
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None

    def __enter__(self) -> EmbeddedCluster:
        return self.start()

    def __exit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


async def _drain() -> None:
    """Let closing transports (TLS shutdowns) finish and end leftover tasks before the loop
    stops, so no socket is left for the garbage collector."""
    await asyncio.sleep(0.05)
    current = asyncio.current_task()
    rest = [t for t in asyncio.all_tasks() if t is not current]
    for t in rest:
        t.cancel()
    await asyncio.gather(*rest, return_exceptions=True)


async def _await(fn: Callable[[], Awaitable[Any]]) -> Any:
    return await fn()
