"""One-shot command execution: run to completion (or stream), with timeouts and interrupts.

Each exec runs in its own process group. On timeout the whole group gets SIGTERM, then SIGKILL
after the grace, so a command cannot outlive its timeout through its children. A command that
exits normally while children it backgrounded keep running leaves them alone (tool calls like
``server &`` are meant to persist); the daemon stops reading their output shortly after the
command itself has exited, so a backgrounded child never holds a response open.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import time
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Coroutine, Iterator
from dataclasses import dataclass, field
from typing import Any

import msgspec

from sandman.wire.daemon import Encoding, ExecEvent, ExecRequest, ExecResult, Output, encode
from sandman.wire.errors import Reason

from .commands import check_cwd, check_env, decode_blob, resolve_argv
from .errors import DaemonError
from .output import HeadCapture, PipeReader, StreamDecoder
from .retained import RetainedExec, RetainedExecs
from .settings import DaemonSettings
from .streams import GuardedStream
from .supervisor import Child, Supervisor, child_environment, signal_name

__all__ = ["ExecManager"]

STREAM_QUEUE_CHUNKS = 64


def _spawn_error_result(exec_id: str, exc: OSError, started: float) -> ExecResult:
    empty = Output(data="", encoding="utf-8", truncated=False, total_bytes=0)
    code = 127 if isinstance(exc, FileNotFoundError) else 126
    return ExecResult(
        id=exec_id,
        exit_code=code,
        signal=None,
        timed_out=False,
        interrupted=False,
        duration_s=round(time.monotonic() - started, 6),
        stdout=empty,
        stderr=empty,
        spawn_error=f"{type(exc).__name__}: {exc}",
    )


@dataclass(frozen=True, slots=True)
class _Prepared:
    argv: list[str]
    stdin: bytes | None
    cap: int


@dataclass(slots=True)
class _Running:
    """State of one exec while it runs."""

    id: str
    child: Child
    started: float
    stdout: HeadCapture
    stderr: HeadCapture
    interrupted: bool = False
    timed_out: bool = False
    readers: list[PipeReader] = field(default_factory=list)
    stdin_task: asyncio.Task[None] | None = None


class ExecManager:
    def __init__(self, settings: DaemonSettings, supervisor: Supervisor) -> None:
        self._settings = settings
        self._supervisor = supervisor
        self._running: dict[str, _Running] = {}
        self._ids: set[str] = set()  # admitted execs, running or about to start
        self._active = 0
        self._kept = RetainedExecs(settings)
        self._tasks: set[asyncio.Task[None]] = set()  # kept execs' runs, scope kills

    @property
    def running(self) -> int:
        return len(self._running)

    # -- admission -------------------------------------------------------------------------

    def check_capacity(self) -> None:
        cap = self._settings.max_concurrent_execs
        if self._active >= cap:
            raise DaemonError(
                f"{self._active} commands already running (cap {cap})", reason=Reason.TOO_MANY_EXECS
            )

    def acquire(self) -> None:
        """Take a slot under the concurrent-command cap (shared with session commands)."""
        self.check_capacity()
        self._active += 1

    def release(self) -> None:
        self._active -= 1

    @contextlib.contextmanager
    def slot(self) -> Iterator[None]:
        self.acquire()
        try:
            yield
        finally:
            self.release()

    def _admit(self, requested_id: str | None) -> str:
        """Take a slot and reserve the exec's id, both before anything starts or streams:
        `_dismiss` gives both back. (Reserving at admission is what keeps two requests that
        arrive together from sharing an id or both passing the last free slot.)"""
        exec_id = requested_id or f"x-{os.urandom(6).hex()}"
        if exec_id in self._ids:
            raise DaemonError(
                f"an exec with id {exec_id!r} is already running", reason=Reason.EXEC_ID_IN_USE
            )
        self.acquire()
        self._ids.add(exec_id)
        return exec_id

    def _dismiss(self, exec_id: str) -> None:
        self._ids.discard(exec_id)
        self.release()

    def _output_cap(self, requested: int | None) -> int:
        cap = self._settings.default_output_bytes if requested is None else requested
        limit = self._settings.max_output_bytes
        if cap > limit:
            raise DaemonError(
                f"max_output_bytes {cap} exceeds the daemon's cap {limit}",
                reason=Reason.OUTPUT_CAP_TOO_LARGE,
            )
        return cap

    # -- run -------------------------------------------------------------------------------

    def _prepare(self, request: ExecRequest) -> _Prepared:
        """Validate everything a client can get wrong, before anything starts or streams."""
        check_env(request.env)
        check_cwd(request.cwd)
        return _Prepared(
            argv=resolve_argv(request.argv, request.command, request.shell),
            stdin=decode_blob(request.stdin),
            cap=self._output_cap(request.max_output_bytes),
        )

    async def run(self, request: ExecRequest) -> ExecResult:
        """Run to completion. With an ``id``, on the daemon's task and kept (retained.py):
        the same request again waits for the same result instead of running anew."""
        if request.id is None:
            return await self._run_here(request)
        record = self._kept.find(request, streaming=False)
        if record is None:
            prepared = self._prepare(request)
            exec_id = self._admit(request.id)
            record = self._kept.add(request, streaming=False)
            self._own(self._run_kept(record, request, prepared, exec_id))
        return await asyncio.shield(record.result)

    async def _run_here(self, request: ExecRequest) -> ExecResult:
        prepared = self._prepare(request)
        exec_id = self._admit(request.id)
        try:
            return await self._run_admitted(request, prepared, exec_id)
        finally:
            self._dismiss(exec_id)

    async def _run_admitted(
        self, request: ExecRequest, prepared: _Prepared, exec_id: str
    ) -> ExecResult:
        state_or_result = self._start(request, prepared, None, exec_id)
        if isinstance(state_or_result, ExecResult):
            return state_or_result
        return await self._finish(state_or_result, request)

    async def _run_kept(
        self, record: RetainedExec, request: ExecRequest, prepared: _Prepared, exec_id: str
    ) -> None:
        try:
            record.finish(await self._run_admitted(request, prepared, exec_id))
        except BaseException as exc:
            record.fail(DaemonError("the daemon stopped the exec", reason=Reason.SHUTTING_DOWN))
            if not isinstance(exc, asyncio.CancelledError):
                raise
        finally:
            self._dismiss(exec_id)

    def stream(self, request: ExecRequest, resume_from: int = 0) -> AsyncIterator[bytes]:
        """NDJSON lines: start, stdout/stderr chunks as they come, then exit.

        Validation and admission happen here, before the 200 response starts: a bad request
        is a 400 and a full daemon a 429, never a broken stream. The slot is held by the
        returned stream from now on and given back when it is closed, started or not.

        With an ``id`` the command runs on the daemon's task and its events are kept: the
        same request with ``resume_from=N`` re-attaches, its stream carrying the events after
        the first N output events. A kept stream every reader left is killed when none comes
        back within ``exec_detach_grace_s``."""
        if resume_from < 0:
            raise DaemonError("resume_from must be >= 0", reason=Reason.INVALID_QUERY)
        if request.id is None:
            if resume_from:
                raise DaemonError("resume_from needs the exec's id", reason=Reason.INVALID_QUERY)
            prepared = self._prepare(request)
            exec_id = self._admit(None)
            events = self._stream_events(request, prepared, exec_id)
            return GuardedStream(events, lambda: self._dismiss(exec_id))
        record = self._kept.find(request, streaming=True)
        if record is None:
            if resume_from:
                raise DaemonError(
                    f"no kept exec {request.id!r} to resume", reason=Reason.EXEC_NOT_FOUND
                )
            prepared = self._prepare(request)
            exec_id = self._admit(request.id)
            record = self._kept.add(request, streaming=True)
            self._own(self._produce(record, request, prepared, exec_id))
        record.check_resume(resume_from)
        record.readers += 1
        return GuardedStream(self._follow(record, resume_from), lambda: self._left(record))

    async def _produce(
        self, record: RetainedExec, request: ExecRequest, prepared: _Prepared, exec_id: str
    ) -> None:
        """Run a kept stream, its lines into ``record`` whoever reads them."""
        events = self._stream_events(request, prepared, exec_id)
        try:
            async with contextlib.aclosing(events):
                await anext(events)  # the start line: each reader gets its own
                async for line in events:
                    record.append(line)
            exit_event = msgspec.json.decode(record.lines[-1], type=ExecEvent)
            assert exit_event.result is not None
            record.finish(exit_event.result)
        except BaseException as exc:
            record.fail(DaemonError("the daemon stopped the exec", reason=Reason.SHUTTING_DOWN))
            if not isinstance(exc, asyncio.CancelledError):
                raise
        finally:
            self._dismiss(exec_id)

    @staticmethod
    async def _follow(record: RetainedExec, position: int) -> AsyncIterator[bytes]:
        yield encode(ExecEvent(event="start", id=record.id)) + b"\n"
        while True:
            while position < len(record.lines):
                yield record.lines[position]
                position += 1
            if record.ended:
                return
            await record.changed()

    def _left(self, record: RetainedExec) -> None:
        """A reader's stream closed: if it was the last and the exec still runs, kill the
        exec unless someone re-attaches within the grace."""
        record.readers -= 1
        if record.readers == 0 and not record.ended:
            loop = asyncio.get_running_loop()
            loop.call_later(self._settings.exec_detach_grace_s, self._abandon, record)

    def _abandon(self, record: RetainedExec) -> None:
        state = self._running.get(record.id)
        if record.readers or record.ended or state is None:
            return
        state.interrupted = True
        state.child.signal_group(signal.SIGKILL)
        self._own(state.child.scope.kill())  # whatever left the group

    def _own(self, work: Coroutine[Any, Any, None]) -> None:
        """Run ``work`` on a task of the daemon's, stopped by ``stop_all``."""
        task = asyncio.ensure_future(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _stream_events(
        self, request: ExecRequest, prepared: _Prepared, exec_id: str
    ) -> AsyncGenerator[bytes, None]:
        queue: asyncio.Queue[tuple[str, bytes]] = asyncio.Queue()
        decoders = {"stdout": StreamDecoder(), "stderr": StreamDecoder()}
        started = self._start(request, prepared, lambda s, b: queue.put_nowait((s, b)), exec_id)
        yield encode(ExecEvent(event="start", id=exec_id)) + b"\n"
        if isinstance(started, ExecResult):
            yield encode(ExecEvent(event="exit", result=started)) + b"\n"
            return
        finish = asyncio.ensure_future(self._finish(started, request))
        try:
            async for line in self._drain_queue(queue, decoders, started, finish):
                yield line
            result = await finish
        finally:
            if not finish.done():  # the client went away mid-stream: stop the command
                started.child.signal_group(signal.SIGKILL)  # at once; the scan comes next
                finish.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await finish
                await started.child.scope.kill()  # whatever left the group
        yield encode(ExecEvent(event="exit", result=result)) + b"\n"

    async def _drain_queue(
        self,
        queue: asyncio.Queue[tuple[str, bytes]],
        decoders: dict[str, StreamDecoder],
        state: _Running,
        finish: asyncio.Future[ExecResult],
    ) -> AsyncIterator[bytes]:
        while not (finish.done() and queue.empty()):
            if queue.qsize() > STREAM_QUEUE_CHUNKS:
                for reader in state.readers:
                    reader.pause()
            getter = asyncio.ensure_future(queue.get())
            waiters: set[asyncio.Future[Any]] = {getter, finish}
            done, _ = await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
            if getter not in done:
                getter.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await getter
                continue
            stream, chunk = getter.result()
            if queue.qsize() <= STREAM_QUEUE_CHUNKS // 2:
                for reader in state.readers:
                    reader.resume()
            line = _chunk_event(stream, decoders[stream].encode(chunk))
            if line:
                yield line
        for stream, decoder in decoders.items():
            line = _chunk_event(stream, decoder.encode(b"", final=True))
            if line:
                yield line

    def _start(
        self,
        request: ExecRequest,
        prepared: _Prepared,
        on_chunk: Callable[[str, bytes], None] | None,
        exec_id: str,
    ) -> _Running | ExecResult:
        argv, stdin, cap = prepared.argv, prepared.stdin, prepared.cap
        env = child_environment(request.env)
        started = time.monotonic()
        try:
            child = self._supervisor.spawn(
                argv,
                cwd=request.cwd or self._settings.workdir,
                env=env,
                stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
            )
        except OSError as exc:
            return _spawn_error_result(exec_id, exc, started)
        state = _Running(exec_id, child, started, HeadCapture(cap), HeadCapture(cap))
        self._attach_pipes(state, on_chunk)
        if stdin:
            state.stdin_task = asyncio.ensure_future(_feed_stdin(child, stdin))
        self._running[exec_id] = state
        return state

    @staticmethod
    def _attach_pipes(state: _Running, on_chunk: Callable[[str, bytes], None] | None) -> None:
        popen = state.child.popen
        for name, pipe, capture in (
            ("stdout", popen.stdout, state.stdout),
            ("stderr", popen.stderr, state.stderr),
        ):
            assert pipe is not None
            fd = os.dup(pipe.fileno())
            pipe.close()

            def sink(data: bytes, name: str = name, capture: HeadCapture = capture) -> None:
                room = capture.room
                capture.feed(data)
                if on_chunk is not None and room > 0:
                    on_chunk(name, data[:room])

            state.readers.append(PipeReader(fd, sink))

    async def _finish(self, state: _Running, request: ExecRequest) -> ExecResult:
        try:
            try:
                async with asyncio.timeout(request.timeout_s):  # no extra task, unlike wait_for
                    code = await state.child.wait()
            except TimeoutError:
                state.timed_out = True
                await state.child.terminate(request.kill_grace_s)
                code = await state.child.wait()
            await self._drain(state)
        finally:
            self._running.pop(state.id, None)
            if state.stdin_task is not None:
                state.stdin_task.cancel()
            for reader in state.readers:
                reader.detach()  # children it left running keep writing into a drained pipe
        return ExecResult(
            id=state.id,
            exit_code=code if code >= 0 else None,
            signal=signal_name(-code) if code < 0 else None,
            timed_out=state.timed_out,
            interrupted=state.interrupted,
            duration_s=round(time.monotonic() - state.started, 6),
            stdout=state.stdout.output(),
            stderr=state.stderr.output(),
        )

    async def _drain(self, state: _Running) -> None:
        """Read what the command wrote before exiting (bounded: children may hold the pipe)."""
        pending = [r.closed for r in state.readers if not r.closed.done()]
        if not pending:
            return
        for reader in state.readers:
            reader.resume()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(self._settings.stream_drain_s):
                for closed in pending:
                    await asyncio.shield(closed)

    # -- control ---------------------------------------------------------------------------

    async def stop_all(self) -> None:
        """Kill every running exec's scope (daemon shutdown), then end the kept ones."""
        for state in list(self._running.values()):
            await state.child.scope.kill()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    def signal(self, exec_id: str, signum: signal.Signals) -> None:
        state = self._running.get(exec_id)
        if state is None:
            raise DaemonError(f"no running exec with id {exec_id!r}", reason=Reason.EXEC_NOT_FOUND)
        state.interrupted = True
        state.child.signal_group(signum)


def _chunk_event(stream: str, encoded: tuple[str, Encoding] | None) -> bytes:
    if encoded is None:
        return b""
    text, encoding = encoded
    event = ExecEvent(event=stream, data=text, encoding=encoding)  # type: ignore[arg-type]
    return encode(event) + b"\n"


async def _feed_stdin(child: Child, data: bytes) -> None:
    pipe = child.popen.stdin
    assert pipe is not None
    fd = os.dup(pipe.fileno())
    pipe.close()
    os.set_blocking(fd, False)
    loop = asyncio.get_running_loop()
    view = memoryview(data)
    try:
        while view:
            try:
                written = os.write(fd, view[:65536])
                view = view[written:]
            except BlockingIOError:
                ready = loop.create_future()
                loop.add_writer(fd, ready.set_result, None)
                try:
                    await ready
                finally:
                    loop.remove_writer(fd)
    except (BrokenPipeError, ConnectionResetError):
        pass  # the command stopped reading: not an error of the exec
    finally:
        os.close(fd)
