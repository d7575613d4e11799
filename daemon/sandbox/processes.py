"""Background processes: long-running commands (servers, watchers, builds) a trainer starts,
polls and stops across many tool calls.

Each process runs in its own session, with its output drained continuously into a bounded
ring buffer per stream (the *tail* is what matters for something still running), so a chatty
server never blocks and never grows the daemon. Finished records are kept for inspection and
evicted oldest-first once the table is full.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from dataclasses import dataclass

from sandman.wire.daemon import ProcessInfo, ProcessOutput, ProcessStartRequest
from sandman.wire.errors import Reason

from .commands import check_cwd, check_env, resolve_argv
from .errors import DaemonError
from .output import PipeReader, TailBuffer
from .settings import DaemonSettings
from .supervisor import Child, Supervisor, child_environment, signal_name

__all__ = ["ProcessManager"]


@dataclass(slots=True)
class _Process:
    id: str
    name: str | None
    argv: list[str]
    child: Child
    started_at: float
    stdout: TailBuffer
    stderr: TailBuffer
    readers: list[PipeReader]
    ended_at: float | None = None

    def info(self) -> ProcessInfo:
        code = self.child.exited.result() if self.child.exited.done() else None
        return ProcessInfo(
            id=self.id,
            name=self.name,
            argv=self.argv,
            pid=self.child.pid,
            running=code is None,
            exit_code=code if code is not None and code >= 0 else None,
            signal=signal_name(-code) if code is not None and code < 0 else None,
            started_at=self.started_at,
            ended_at=self.ended_at,
            stdout_bytes=self.stdout.total,
            stderr_bytes=self.stderr.total,
        )


class ProcessManager:
    def __init__(self, settings: DaemonSettings, supervisor: Supervisor) -> None:
        self._settings = settings
        self._supervisor = supervisor
        self._procs: dict[str, _Process] = {}

    def __len__(self) -> int:
        return len(self._procs)

    def start(self, request: ProcessStartRequest) -> ProcessInfo:
        argv = resolve_argv(request.argv, request.command, request.shell)
        check_env(request.env)
        check_cwd(request.cwd)
        self._make_room()
        env = child_environment(request.env)
        try:
            child = self._supervisor.spawn(argv, cwd=request.cwd or self._settings.workdir, env=env)
        except OSError as exc:
            raise DaemonError(
                f"cannot start {argv[0]!r}: {exc}", reason=Reason.SPAWN_FAILED
            ) from exc
        cap = self._settings.process_tail_bytes
        proc = _Process(
            id=f"p-{os.urandom(6).hex()}",
            name=request.name,
            argv=argv,
            child=child,
            started_at=time.time(),
            stdout=TailBuffer(cap),
            stderr=TailBuffer(cap),
            readers=[],
        )
        popen = child.popen
        for pipe, buffer in ((popen.stdout, proc.stdout), (popen.stderr, proc.stderr)):
            assert pipe is not None
            proc.readers.append(PipeReader(os.dup(pipe.fileno()), buffer.feed))
            pipe.close()
        child.exited.add_done_callback(lambda _: self._mark_ended(proc))
        self._procs[proc.id] = proc
        return proc.info()

    @staticmethod
    def _mark_ended(proc: _Process) -> None:
        proc.ended_at = time.time()

    def _make_room(self) -> None:
        if len(self._procs) < self._settings.max_processes:
            return
        finished = [p for p in self._procs.values() if not p.child.running]
        if not finished:
            raise DaemonError(
                f"{len(self._procs)} background processes are running",
                reason=Reason.TOO_MANY_PROCESSES,
            )
        oldest = min(finished, key=lambda p: p.ended_at or p.started_at)
        self._forget(oldest)

    def _forget(self, proc: _Process) -> None:
        self._procs.pop(proc.id, None)
        for reader in proc.readers:
            reader.close()

    def get(self, proc_id: str) -> _Process:
        proc = self._procs.get(proc_id)
        if proc is None:
            raise DaemonError(f"no background process {proc_id!r}", reason=Reason.PROCESS_NOT_FOUND)
        return proc

    def list(self) -> list[ProcessInfo]:
        return [p.info() for p in self._procs.values()]

    def output(self, proc_id: str, tail_bytes: int | None) -> ProcessOutput:
        proc = self.get(proc_id)
        return ProcessOutput(
            id=proc.id,
            running=proc.child.running,
            stdout=proc.stdout.output(tail_bytes),
            stderr=proc.stderr.output(tail_bytes),
        )

    def signal(self, proc_id: str, signum: signal.Signals) -> ProcessInfo:
        proc = self.get(proc_id)
        proc.child.signal_group(signum)
        return proc.info()

    async def wait(self, proc_id: str, timeout_s: float) -> ProcessInfo:
        proc = self.get(proc_id)
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout_s):
                await proc.child.wait()
        return proc.info()

    async def remove(self, proc_id: str) -> ProcessInfo:
        """Stop its scope (TERM, then KILL after the grace), then forget the record. A leader
        that already exited may have left children: they are stopped all the same."""
        proc = self.get(proc_id)
        await proc.child.terminate(self._settings.shutdown_grace_s)
        self._forget(proc)
        return proc.info()

    async def stop_all(self) -> None:
        await asyncio.gather(
            *(p.child.terminate(self._settings.shutdown_grace_s) for p in self._procs.values())
        )
        for proc in list(self._procs.values()):
            self._forget(proc)
