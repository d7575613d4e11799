"""The kubelets' streaming side: what ``pods/log?follow``, ``pods/exec`` and ``pods/attach``
reach on the pod's node (upstream: the kubelet's streaming server, behind the API server).

Why here and not in the API server: only the node knows whether anything runs for a pod and
how to reach it. The API server (``apiserver/streams.py``) checks the request and hands it to
``KubeletStreams``, which finds the pod's kubelet and its runtime:

- ``process``: logs are followed in the container's log file until its process exits; exec
  runs the command inside the container's namespaces (``exec.py``);
- ``virtual``: nothing runs. A followed log stays open and empty until the pod is gone
  (a container that writes nothing); exec and attach are refused with a 400 that says so;
- ``cri``: a followed log is the log so far (containerd's file; following it is not
  modelled), exec and attach are refused with a 400 that says so.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import AsyncGenerator, Awaitable, Callable, Mapping
from typing import TYPE_CHECKING

from simcluster.apiserver.streams import ExecProcess, PodStream
from simcluster.errors import BadRequest
from simcluster.kubelet.exec import exec_argv, init_pid, start_exec, terminal_session
from simcluster.kubelet.podstate import PodState
from simcluster.kubelet.process import ProcessRuntime

if TYPE_CHECKING:
    from simcluster.kubelet.kubelet import Kubelet

__all__ = ["KubeletStreams"]

#: How often a followed log file is read for new output while its process runs.
FOLLOW_INTERVAL_S = 0.1


def _tail(data: bytes, lines: int | None) -> bytes:
    if lines is None:
        return data
    return b"".join(data.splitlines(keepends=True)[-lines:]) if lines > 0 else b""


class KubeletStreams:
    """The ``PodStreams`` backend of a cluster: routes each stream to its pod's node."""

    def __init__(self, kubelets: Mapping[str, Kubelet]) -> None:
        self.kubelets = kubelets

    def _kubelet(self, stream: PodStream) -> Kubelet:
        kubelet = self.kubelets.get(stream.node)
        if kubelet is None:
            raise BadRequest(f'node "{stream.node}" of pod {stream.pod} has no kubelet')
        return kubelet

    def _state(self, kubelet: Kubelet, stream: PodStream) -> PodState | None:
        state = kubelet.pods.get(stream.uid)
        return state if state is not None and state.sandbox is not None else None

    async def follow_log(self, stream: PodStream) -> AsyncGenerator[bytes, None]:
        kubelet = self._kubelet(stream)
        runtime = kubelet.runtime
        if isinstance(runtime, ProcessRuntime) and not self._virtual_pod(kubelet, stream):
            async for chunk in self._follow_file(runtime, stream):
                yield chunk
            return
        reader = getattr(runtime, "read_log", None)
        yield (
            _tail(reader(stream.namespace, stream.pod, stream.container), stream.tail_lines)
            if (reader is not None)
            else b""
        )
        if runtime.name == "virtual" or self._virtual_pod(kubelet, stream):
            # nothing is written until the pod is gone; the kubelet signals no event when
            # it forgets a pod, so this is a poll (one per followed virtual log)
            while stream.uid in kubelet.pods:  # noqa: ASYNC110
                await asyncio.sleep(FOLLOW_INTERVAL_S)

    def _virtual_pod(self, kubelet: Kubelet, stream: PodStream) -> bool:
        state = self._state(kubelet, stream)
        return state is not None and state.sandbox is not None and state.sandbox.virtual

    async def _follow_file(
        self, runtime: ProcessRuntime, stream: PodStream
    ) -> AsyncGenerator[bytes, None]:
        """The log so far (its last ``tail_lines``), then what the running process appends,
        until it exits (then whatever it wrote last)."""
        proc = runtime.process(stream.uid, stream.container)
        path = runtime.log_path(stream.namespace, stream.pod, stream.container)
        try:
            log = path.open("rb")
        except FileNotFoundError:
            yield b""
            return
        with log:
            yield _tail(log.read(), stream.tail_lines)
            if proc is None:
                return
            exited = asyncio.ensure_future(proc.wait())
            try:
                while not exited.done():
                    await asyncio.wait({exited}, timeout=FOLLOW_INTERVAL_S)
                    if data := log.read():
                        yield data
            finally:
                exited.cancel()

    def exec(self, stream: PodStream) -> Callable[[], Awaitable[ExecProcess]]:
        kubelet = self._kubelet(stream)
        runtime = kubelet.runtime
        state = self._state(kubelet, stream)
        if runtime.name == "virtual" or self._virtual_pod(kubelet, stream):
            raise BadRequest(
                f"pod {stream.pod} runs on node {stream.node} under the virtual runtime: "
                f"nothing runs there to {stream.subresource} into (simcluster serves "
                "pods/exec on process-runtime nodes)"
            )
        if not isinstance(runtime, ProcessRuntime):
            raise BadRequest(
                f"pods/{stream.subresource} is not served for the {runtime.name} runtime "
                "(simcluster serves it on process-runtime nodes)"
            )
        proc = runtime.process(stream.uid, stream.container)
        if state is None or state.sandbox is None or proc is None:
            raise BadRequest(f'container not found ("{stream.container}")')
        container = next(c for c in state.sandbox.containers if c.name == stream.container)
        env = runtime.environment(state.sandbox, container)
        if not runtime.sandboxed:
            workdir = container.working_dir or "/"
            argv = terminal_session(stream.command) if stream.tty else list(stream.command)
            return functools.partial(
                start_exec, argv, env, workdir, stdin=stream.stdin, tty=stream.tty
            )
        try:
            pid = init_pid(proc.pid)
        except ProcessLookupError:
            raise BadRequest(f'container not found ("{stream.container}")') from None
        argv = exec_argv(pid, container, stream.command, stream.tty)
        return functools.partial(
            start_exec, argv, env, None, stdin=stream.stdin, tty=stream.tty, pty_of=pid
        )
