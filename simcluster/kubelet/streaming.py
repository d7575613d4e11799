"""The kubelets' streaming side: what ``pods/log?follow``, ``pods/exec`` and ``pods/attach``
reach on the pod's node (upstream: the kubelet's streaming server, behind the API server).

Why here and not in the API server: only the node knows whether anything runs for a pod and
how to reach it. The API server (``apiserver/streams.py``) checks the request and hands it to
``KubeletStreams``, which finds the pod's kubelet and its runtime:

- ``process``: logs are followed in the container's log file until its process exits; exec
  runs the command inside the container's namespaces (``exec.py``); attach is the log file
  from the moment of attaching (``LogAttach``);
- ``virtual``: nothing runs. A followed log stays open and empty until the pod is gone
  (a container that writes nothing); exec and attach are refused with a 400 that says so;
- ``cri``: a followed log is the log so far (containerd's file; following it is not
  modelled), exec and attach are refused with a 400 that says so.
"""

from __future__ import annotations

import asyncio
import functools
import os
from collections.abc import AsyncGenerator, Awaitable, Callable, Mapping
from pathlib import Path
from typing import IO, TYPE_CHECKING

from simcluster.apiserver.streams import ExecProcess, PodStream
from simcluster.errors import BadRequest
from simcluster.kubelet.exec import exec_argv, init_pid, start_exec, terminal_session
from simcluster.kubelet.podstate import PodState
from simcluster.kubelet.process import ProcessRuntime

if TYPE_CHECKING:
    from simcluster.kubelet.kubelet import Kubelet

__all__ = ["KubeletStreams", "LogAttach"]

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
        if not stream.node:  # not bound: nothing has run, the log is empty
            yield b""
            return
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

    def _running(
        self, stream: PodStream
    ) -> tuple[ProcessRuntime, PodState, asyncio.subprocess.Process]:
        """The process-runtime container an exec or attach reaches, or the node's refusal."""
        kubelet = self._kubelet(stream)
        runtime = kubelet.runtime
        if runtime.name == "virtual" or self._virtual_pod(kubelet, stream):
            raise BadRequest(
                f"pod {stream.pod} runs on node {stream.node} under the virtual runtime: "
                f"nothing runs there to {stream.subresource} into (simcluster serves "
                f"pods/{stream.subresource} on process-runtime nodes)"
            )
        if not isinstance(runtime, ProcessRuntime):
            raise BadRequest(
                f"pods/{stream.subresource} is not served for the {runtime.name} runtime "
                "(simcluster serves it on process-runtime nodes)"
            )
        proc = runtime.process(stream.uid, stream.container)
        state = self._state(kubelet, stream)
        if state is None or state.sandbox is None or proc is None:
            raise BadRequest(f'container not found ("{stream.container}")')
        return runtime, state, proc

    def attach(self, stream: PodStream) -> Callable[[], Awaitable[ExecProcess]]:
        runtime, _, proc = self._running(stream)
        path = runtime.log_path(stream.namespace, stream.pod, stream.container)
        return functools.partial(LogAttach.open, path, proc)

    def exec(self, stream: PodStream) -> Callable[[], Awaitable[ExecProcess]]:
        runtime, state, proc = self._running(stream)
        assert state.sandbox is not None
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


class LogAttach:
    """``kubectl attach`` to a process-runtime container: what it writes from now on (one
    stream: the runtime sends its stdout and stderr to one log file), until it exits; then
    the session ends with Success, as the kubelet's attach does. The runtime starts
    containers with stdin from ``/dev/null`` and keeps none, so what the client types is
    dropped; leaving the session leaves the container running."""

    def __init__(self, log: IO[bytes], proc: asyncio.subprocess.Process) -> None:
        self.log = log
        self.proc = proc
        self._exited = asyncio.ensure_future(proc.wait())

    @classmethod
    async def open(cls, path: Path, proc: asyncio.subprocess.Process) -> LogAttach:
        log = path.open("rb")
        log.seek(0, os.SEEK_END)
        return cls(log, proc)

    async def read_stdout(self) -> bytes:
        if self.log.closed:
            return b""
        while not (data := self.log.read()) and not self._exited.done():
            await asyncio.wait({self._exited}, timeout=FOLLOW_INTERVAL_S)
        data = data or self.log.read()
        if not data:  # the container ended and all it wrote was sent
            self.log.close()
        return data

    async def read_stderr(self) -> bytes:
        return b""

    async def write_stdin(self, data: bytes) -> None:
        return None  # no stdin kept (class docstring)

    def close_stdin(self) -> None:
        return None

    def resize(self, width: int, height: int) -> None:
        return None

    async def wait(self) -> int:
        await asyncio.shield(self._exited)
        return 0

    async def kill(self) -> None:
        self._exited.cancel()
        self.log.close()
