# Generated from sandman/sdk/sandbox.py by `make generate` (codegen): do not edit.
"""The blocking twin of :mod:`sandman.sdk.sandbox`: Sandbox.

Each method is one call of its async twin through the portal
(:mod:`sandman.sdk.blocking.portal`); generated from the async source by ``codegen.blocking``.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from types import TracebackType

from anyio.from_thread import BlockingPortal

from sandman.sdk.blocking.portal import Bound
from sandman.sdk.blocking.ports import Port
from sandman.sdk.blocking.tools import Files, Processes, Session
from sandman.sdk.results import CommandResult, StreamEvent
from sandman.sdk.sandbox import AsyncSandbox
from sandman.wire.daemon import DaemonInfo
from sandman.wire.facade import Sandbox as SandboxView

__all__ = ["Sandbox"]


class Sandbox(Bound[AsyncSandbox]):
    """Blocking twin of :class:`sandman.sdk.sandbox.AsyncSandbox`.

    A handle on one sandbox; cheap to create (no I/O until a call)."""

    def __init__(self, portal: BlockingPortal, twin: AsyncSandbox) -> None:
        super().__init__(portal, twin)
        self.files = Files(portal, twin.files)
        self.processes = Processes(portal, twin.processes)

    @property
    def async_sandbox(self) -> AsyncSandbox:
        """The async object this one drives."""
        return self._async

    @property
    def view(self) -> SandboxView:
        """The facade's record as last seen: state, reason, node, labels, timestamps."""
        return self._async.view

    def __repr__(self) -> str:
        return repr(self._async).replace("<Async", "<", 1)

    @property
    def id(self) -> str:
        return self._async.id

    @property
    def state(self) -> str:
        return self._async.state

    @property
    def reason(self) -> str | None:
        return self._async.reason

    def refresh(self) -> Sandbox:
        return self._wrap(Sandbox, self._call(lambda: self._async.refresh()))

    def wait_ready(self, timeout_s: float | None = None) -> Sandbox:
        """Until ``ready``; raises the typed reason if it ends or the timeout passes first."""
        return self._wrap(Sandbox, self._call(lambda: self._async.wait_ready(timeout_s)))

    def release(self) -> None:
        """Release the sandbox (its pod is deleted); releasing twice is harmless."""
        self._call(lambda: self._async.release())

    def release_quietly(self) -> None:
        """Release, shielded from cancellation and bounded in time; failures are logged."""
        self._call(lambda: self._async.release_quietly())

    def __enter__(self) -> Sandbox:
        return self._wrap(Sandbox, self._call(lambda: self._async.__aenter__()))

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._call(lambda: self._async.__aexit__(exc_type, exc, tb))

    def exec(
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
        sent again and the daemon answers the one run's result, so the command runs once."""
        return self._call(
            lambda: self._async.exec(
                command,
                cwd=cwd,
                env=env,
                timeout_s=timeout_s,
                stdin=stdin,
                max_output_bytes=max_output_bytes,
                exec_id=exec_id,
            )
        )

    def exec_stream(
        self,
        command: str | Sequence[str],
        *,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        timeout_s: float = 60.0,
        stdin: str | bytes | None = None,
        exec_id: str | None = None,
    ) -> Iterator[StreamEvent]:
        """Output chunks as the command produces them, then one ``exit`` event with the result.

        If the connection breaks, the stream is resumed under the exec's id after the output
        events already received: nothing is repeated or missing, and the command runs once.
        Stop iterating (or cancel) and the SDK tells the daemon to kill the command."""
        return self._iterate(
            self._async.exec_stream(
                command, cwd=cwd, env=env, timeout_s=timeout_s, stdin=stdin, exec_id=exec_id
            )
        )

    def session(
        self,
        name: str = "main",
        *,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        shell: str | None = None,
    ) -> Session:
        """A persistent shell named ``name`` (created, or attached to if it exists)."""
        return self._wrap(
            Session, self._call(lambda: self._async.session(name, cwd=cwd, env=env, shell=shell))
        )

    def port(self, port: int) -> Port:
        """A server listening on ``port`` inside the sandbox, reached through the facade:
        ``sandbox.port(8080).request("GET", "/health")`` (docs/trainer-guide.md, "Ports")."""
        return self._wrap(Port, self._async.port(port))

    def url(self, port: int, path: str = "/") -> str:
        """The facade URL of ``path`` (query included) on ``port`` inside the sandbox; a
        request to it carries :attr:`headers` (a browser tool, another HTTP client)."""
        return self._async.url(port, path)

    @property
    def headers(self) -> dict[str, str]:
        """The headers a request to :meth:`url` carries: the tenant's bearer token."""
        return self._async.headers

    def info(self) -> DaemonInfo:
        """The daemon's view: uptime, idle time, cgroup limits and usage."""
        return self._call(lambda: self._async.info())
