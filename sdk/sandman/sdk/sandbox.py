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
from types import TracebackType
from typing import Any

import anyio

from sandman.sdk.daemon_client import SandboxClient
from sandman.wire.daemon import DaemonInfo
from sandman.wire.facade import Sandbox as SandboxView

from .errors import (
    AdmissionFailed,
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
from .results import CommandResult, StreamEvent
from .tools import (
    AsyncFiles,
    AsyncProcesses,
    AsyncSession,
    ToolCalls,
    command_fields,
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
        return cls(410, reason, message, sandbox=view)
    return SandboxTerminated(410, reason, message, sandbox=view)


def _timeout_error(view: SandboxView, timeout_s: float) -> SandboxStartError:
    message = f"sandbox {view.id} not ready after {timeout_s:.0f} s: {view.state}"
    if view.message:
        message += f" ({view.message})"
    if view.reason == "unschedulable":
        return Unschedulable(408, "unschedulable", message, sandbox=view)
    return SandboxTimeout(408, "sandbox_timeout", message, sandbox=view)


class AsyncSandbox:
    """A handle on one sandbox; cheap to create (no I/O until a call)."""

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
        self._calls = ToolCalls(client, view.id, transport.timeouts)
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
    ) -> CommandResult:
        """Run a command to completion: a string runs under ``/bin/sh -c``, a list as argv.

        A command that times out is killed (its whole process group) and reported with
        ``timed_out=True``; that is a result, not an exception. Never retried.
        """
        fields = _exec_fields(command, cwd, env, timeout_s, stdin, max_output_bytes)
        with self._calls.guard("exec", timeout_s):
            result = await self._calls.client.exec(**fields)
        return CommandResult.from_wire(result)

    async def exec_stream(
        self,
        command: str | Sequence[str],
        *,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        timeout_s: float = 60.0,
        stdin: str | bytes | None = None,
    ) -> AsyncIterator[StreamEvent]:
        """Output chunks as the command produces them, then one ``exit`` event with the result.

        Stop iterating (or cancel) and the connection closes; the daemon then kills the command.
        """
        fields = _exec_fields(command, cwd, env, timeout_s, stdin, None)
        events = self._calls.client.exec_stream(**fields)
        async with contextlib.aclosing(events):
            while True:
                with self._calls.guard("exec stream", timeout_s):
                    try:
                        event = await events.__anext__()
                    except StopAsyncIteration:
                        return
                yield StreamEvent.from_wire(event)

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

    async def info(self) -> DaemonInfo:
        """The daemon's view: uptime, idle time, cgroup limits and usage."""
        with self._calls.guard("info"):
            return await self._calls.client.info()


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
