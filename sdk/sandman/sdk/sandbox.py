"""One sandbox as a trainer holds it: its state, its tool calls, and a guaranteed release.

``async with sandbox:`` releases it when the block ends — normally, on an exception, and on
cancellation (the release runs in a shielded cancel scope with its own deadline, so a
cancelled rollout does not leave a pod behind until its TTL).

State comes from the facade (``refresh``, ``wait_ready`` long-polls its watch cache); a
sandbox that ended is reported as a typed exception carrying its last state and reason.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any

import aiohttp
import anyio

from sandman.sdk.daemon_client import SandboxClient
from sandman.wire.daemon import DaemonInfo
from sandman.wire.facade import Sandbox as SandboxView

from .errors import (
    AdmissionFailed,
    ClientReason,
    ImagePullFailed,
    SandboxFailed,
    SandboxNotFound,
    SandboxStartError,
    SandboxTerminated,
    SandboxTimeout,
    SandmanError,
    Unschedulable,
    error_for,
)
from .ports import AsyncPort
from .results import CommandResult, StreamEvent
from .tools import (
    AsyncFiles,
    AsyncProcesses,
    AsyncSession,
    ToolCalls,
    command_fields,
    new_exec_id,
    open_session,
)
from .transport import Transport

__all__ = ["AsyncSandbox", "state_error"]

log = logging.getLogger("sandman.sdk")
_ENDED = frozenset({"failed", "terminated", "releasing"})
_FAILED: dict[str, type[SandboxFailed]] = {
    "image_pull_failed": ImagePullFailed,
    "admission_failed": AdmissionFailed,
}


def state_error(view: SandboxView) -> SandboxTerminated:
    """The exception for a sandbox that ended (``failed``/``terminated``/``releasing``)."""
    reason = view.reason or view.state
    message = f"sandbox {view.id} is {view.state}" + (f": {view.message}" if view.message else "")
    if view.state == "failed":
        cls = _FAILED.get(reason, SandboxFailed)
        return cls(message, reason=reason, status=410, sandbox=view)
    return SandboxTerminated(message, reason=reason, status=410, sandbox=view)


def _timeout_error(view: SandboxView, timeout_s: float) -> SandboxStartError:
    message = f"sandbox {view.id} not ready after {timeout_s:.0f} s: {view.state}"
    if view.message:
        message += f" ({view.message})"
    if view.reason == ClientReason.UNSCHEDULABLE:  # the state's reason becomes the error's
        return Unschedulable(message, reason=ClientReason.UNSCHEDULABLE, status=408, sandbox=view)
    return SandboxTimeout(message, reason=ClientReason.SANDBOX_TIMEOUT, status=408, sandbox=view)


class AsyncSandbox:
    """A handle on one sandbox; cheap to create (no I/O until a call)."""

    # The attributes a trainer may read (the blocking twin, generated from this class,
    # mirrors them: ``sandman.sdk.blocking.sandbox``).
    #: The facade's record as last seen: state, reason, node, labels, timestamps.
    view: SandboxView
    #: Files in the sandbox.
    files: AsyncFiles
    #: Background processes in the sandbox.
    processes: AsyncProcesses

    def __init__(self, transport: Transport, view: SandboxView) -> None:
        self._transport = transport
        self.view = view
        client = SandboxClient(
            transport.url,
            transport.token,
            session=transport.session,
            prefix=f"/v1/sandboxes/{view.id}",
            errors=error_for,
        )
        self._calls = ToolCalls(client, view.id, transport.timeouts, transport.retry_delay)
        self.files = AsyncFiles(self._calls)
        self.processes = AsyncProcesses(self._calls)

    def __repr__(self) -> str:
        return f"<AsyncSandbox {self.id} {self.state}>"

    @property
    def id(self) -> str:
        return self.view.id

    @property
    def state(self) -> str:
        return self.view.state

    @property
    def reason(self) -> str | None:
        return self.view.reason

    # --- lifecycle ------------------------------------------------------------------------
    async def refresh(self) -> AsyncSandbox:
        self.view = await self._transport.request(
            "GET", f"/v1/sandboxes/{self.id}", SandboxView, idempotent=True
        )
        return self

    async def wait_ready(self, timeout_s: float | None = None) -> AsyncSandbox:
        """Until ``ready``; raises the typed reason if it ends or the timeout passes first."""
        timeouts = self._transport.timeouts
        limit = timeouts.ready_s if timeout_s is None else timeout_s
        deadline = time.monotonic() + limit
        while self.view.state != "ready":
            if self.view.state in _ENDED:
                raise state_error(self.view)
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise _timeout_error(self.view, limit)
            poll = min(remaining, timeouts.poll_s)
            self.view = await self._transport.request(
                "GET",
                f"/v1/sandboxes/{self.id}",
                SandboxView,
                params={"wait": "ready", "timeout_s": f"{poll:.3f}"},
                idempotent=True,
                timeout_s=poll + timeouts.request_s,
            )
        return self

    async def release(self) -> None:
        """Release the sandbox (its pod is deleted); releasing twice is harmless."""
        try:
            self.view = await self._transport.request(
                "DELETE", f"/v1/sandboxes/{self.id}", SandboxView, idempotent=True
            )
        except SandboxNotFound:
            pass

    async def release_quietly(self) -> None:
        """Release, shielded from cancellation and bounded in time; failures are logged."""
        with anyio.CancelScope(shield=True) as scope:
            scope.deadline = anyio.current_time() + self._transport.timeouts.release_s
            try:
                await self.release()
            except SandmanError as e:
                log.warning("could not release sandbox %s: %s", self.id, e)
        if scope.cancelled_caught:
            log.warning("releasing sandbox %s timed out", self.id)

    async def __aenter__(self) -> AsyncSandbox:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.release_quietly()

    # --- tool calls -----------------------------------------------------------------------
    async def exec(
        self,
        command: str | Sequence[str],
        *,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        timeout_s: float = 60.0,
        stdin: str | bytes | None = None,
        max_output_bytes: int | None = None,
        exec_id: str | None = None,
    ) -> CommandResult:
        """Run a command to completion: a string runs under ``/bin/sh -c``, a list as argv.

        A command that times out is killed (its whole process group) and reported with
        ``timed_out=True``; that is a result, not an exception. The call carries an id
        (``exec_id``, else one drawn here): if the connection breaks, the same request is
        sent again and the daemon answers the one run's result, so the command runs once.
        """
        fields = _exec_fields(command, cwd, env, timeout_s, stdin, max_output_bytes)
        fields["id"] = exec_id or new_exec_id()
        client = self._calls.client
        result = await self._calls.reattaching("exec", lambda: client.exec(**fields), timeout_s)
        return CommandResult.from_wire(result)

    async def exec_stream(
        self,
        command: str | Sequence[str],
        *,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        timeout_s: float = 60.0,
        stdin: str | bytes | None = None,
        exec_id: str | None = None,
    ) -> AsyncIterator[StreamEvent]:
        """Output chunks as the command produces them, then one ``exit`` event with the result.

        If the connection breaks, the stream is resumed under the exec's id after the output
        events already received: nothing is repeated or missing, and the command runs once.
        Stop iterating (or cancel) and the SDK tells the daemon to kill the command.
        """
        fields = _exec_fields(command, cwd, env, timeout_s, stdin, None)
        fields["id"] = exec_id or new_exec_id()
        progress = _StreamProgress()
        try:
            while True:
                try:
                    async for event in self._stream_once(fields, timeout_s, progress):
                        yield event
                    return
                except SandmanError as e:
                    progress.attempts += 1
                    delay = self._calls.reattach_delay(progress.attempts, e)
                    if delay is None:
                        raise
                    log.info("exec stream on %s: %s; resuming in %.2f s", self.id, e, delay)
                    await anyio.sleep(delay)
        finally:
            if progress.started and not progress.ended:  # ours runs (not a refused call's)
                await self._kill_quietly(fields["id"])

    async def _stream_once(
        self, fields: dict[str, Any], timeout_s: float, progress: _StreamProgress
    ) -> AsyncIterator[StreamEvent]:
        events = self._calls.client.exec_stream(resume_from=progress.outputs, **fields)
        async with contextlib.aclosing(events):
            while True:
                with self._calls.guard("exec stream", timeout_s):
                    try:
                        event = await events.__anext__()
                    except StopAsyncIteration:
                        return
                if event.event == "start":
                    if progress.started:
                        continue  # a resumed stream's own start
                    progress.started = True
                elif event.event == "exit":
                    progress.ended = True
                else:
                    progress.outputs += 1
                yield StreamEvent.from_wire(event)

    async def _kill_quietly(self, exec_id: str) -> None:
        """A stream left before its end: kill its command now, not after the daemon's grace
        for a re-attach (best effort, bounded, never raising over the caller's exception)."""
        bound = self._transport.timeouts.release_s
        with anyio.CancelScope(shield=True), anyio.move_on_after(bound):
            try:
                await self._calls.client.signal_exec(exec_id, "SIGKILL")
            except (SandmanError, aiohttp.ClientError) as e:
                log.debug("could not stop exec %s on %s: %s", exec_id, self.id, e)

    async def session(
        self,
        name: str = "main",
        *,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        shell: str | None = None,
    ) -> AsyncSession:
        """A persistent shell named ``name`` (created, or attached to if it exists)."""
        return await open_session(self._calls, name, cwd=cwd, env=env, shell=shell)

    def port(self, port: int) -> AsyncPort:
        """A server listening on ``port`` inside the sandbox, reached through the facade:
        ``sandbox.port(8080).request("GET", "/health")`` (docs/trainer-guide.md, "Ports")."""
        return AsyncPort(self._transport, self.id, port)

    def url(self, port: int, path: str = "/") -> str:
        """The facade URL of ``path`` (query included) on ``port`` inside the sandbox; a
        request to it carries :attr:`headers` (a browser tool, another HTTP client)."""
        return self.port(port).url + "/" + path.lstrip("/")

    @property
    def headers(self) -> dict[str, str]:
        """The headers a request to :meth:`url` carries: the tenant's bearer token."""
        return {"Authorization": f"Bearer {self._transport.token}"}

    async def info(self) -> DaemonInfo:
        """The daemon's view: uptime, idle time, cgroup limits and usage."""
        with self._calls.guard("info"):
            return await self._calls.client.info()


@dataclass(slots=True)
class _StreamProgress:
    """What a (resumable) exec stream has delivered so far."""

    started: bool = False
    outputs: int = 0
    ended: bool = False
    attempts: int = 0


def _exec_fields(
    command: str | Sequence[str],
    cwd: str | None,
    env: dict[str, str] | None,
    timeout_s: float,
    stdin: str | bytes | None,
    max_output_bytes: int | None,
) -> dict[str, Any]:
    fields = {**command_fields(command), "timeout_s": timeout_s, "env": env or {}}
    for key, value in (("cwd", cwd), ("stdin", stdin), ("max_output_bytes", max_output_bytes)):
        if value is not None:
            fields[key] = value
    return fields
