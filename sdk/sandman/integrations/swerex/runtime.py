"""SWE-ReX's ``AbstractRuntime`` on one Sandman sandbox (the async SDK, no server in the sandbox).

SWE-ReX's own deployments start its server (``swerex-remote``) inside the container and talk
to it over HTTP; Sandman's daemon already is such a server, so this runtime maps each of
SWE-ReX's requests onto a daemon call and keeps SWE-ReX's semantics and exception types:

- a ``BashAction`` runs in a daemon session (a persistent shell on a PTY: ``cd``, exports
  and shell variables carry over). It is checked with ``bash -n`` first, as SWE-ReX does
  (``BashIncorrectSyntaxError`` with the shell's stdout/stderr), its timeout is the
  daemon's (``CommandTimeoutError``; the daemon has already typed Ctrl-C, so the session is
  usable at once), ``check`` is SWE-ReX's (``"raise"``: ``NonZeroExitCodeError``;
  ``"ignore"``: no exit code);
- ``execute`` is one exec (``shell``, ``cwd``, ``env``, ``merge_output_streams`` as
  ``subprocess.run``), ``CommandTimeoutError``/``NonZeroExitCodeError`` likewise;
- files: ``read_file`` (``FileNotFoundError`` for a missing file), ``write_file`` (parents
  created), ``upload`` (a file, or a directory as one tar stream).

Not supported (docs/integrations.md): interactive commands (``is_interactive_command``/
``is_interactive_quit``: the daemon runs a session command to completion, it does not type
into a program waiting on input; :class:`InteractiveCommandsUnsupported`), ``expect``
strings (a command ends when it exits), and ``BashInterruptAction`` has nothing to interrupt
(a timed-out command was already interrupted): it answers an empty observation.
"""

from __future__ import annotations

import contextlib
import logging
import re
import shlex
import signal
from pathlib import Path
from typing import Any

import anyio
from swerex.exceptions import (
    BashIncorrectSyntaxError,
    CommandTimeoutError,
    NonZeroExitCodeError,
    SessionDoesNotExistError,
    SessionExistsError,
    SwerexException,
)
from swerex.runtime.abstract import (
    AbstractRuntime,
    Action,
    BashAction,
    BashInterruptAction,
    BashObservation,
    CloseBashSessionResponse,
    CloseResponse,
    CloseSessionRequest,
    CloseSessionResponse,
    Command,
    CommandResponse,
    CreateBashSessionResponse,
    CreateSessionRequest,
    CreateSessionResponse,
    IsAliveResponse,
    Observation,
    ReadFileRequest,
    ReadFileResponse,
    UploadRequest,
    UploadResponse,
    WriteFileRequest,
    WriteFileResponse,
)

from sandman.sdk import AsyncSandbox, AsyncSession, CommandResult, Conflict, NotFound, SandmanError

__all__ = ["InteractiveCommandsUnsupported", "SandmanRuntime"]

#: A timeout of None ("no timeout" in SWE-ReX) still needs a bound for the daemon.
UNBOUNDED_S = 24 * 3600.0
_MERGE_STDERR = ["/bin/sh", "-c", 'exec "$@" 2>&1', "sh"]
_ANSI = re.compile(r"\x1B[@-_][0-?]*[ -/]*[@-~]")


class InteractiveCommandsUnsupported(SwerexException, NotImplementedError):
    """An ``is_interactive_command``/``is_interactive_quit`` action: Sandman's sessions run a
    command to completion and cannot type into a program that waits for input."""


class SandmanRuntime(AbstractRuntime):
    """SWE-ReX's runtime protocol on one ready sandbox (``SandmanDeployment`` makes one)."""

    def __init__(
        self,
        sandbox: AsyncSandbox,
        *,
        check_syntax: bool = True,
        logger: logging.Logger | None = None,
    ) -> None:
        """``check_syntax``: ``bash -n`` before each session command, as SWE-ReX does (one
        more exec, ~20 ms on the local stack: docs/integrations.md); off, a syntax error is
        the shell's own output and exit code 2."""
        self.sandbox = sandbox
        self.check_syntax = check_syntax
        self.logger = logger or logging.getLogger("rex-runtime")
        self._sessions: dict[str, AsyncSession] = {}

    async def is_alive(self, *, timeout: float | None = None) -> IsAliveResponse:  # noqa: ASYNC109 (SWE-ReX's signature)
        try:
            with _bounded(timeout):
                await self.sandbox.info()
        except (SandmanError, TimeoutError) as e:
            return IsAliveResponse(is_alive=False, message=f"{type(e).__name__}: {e}")
        return IsAliveResponse(is_alive=True)

    # --- sessions -------------------------------------------------------------------------
    async def create_session(self, request: CreateSessionRequest) -> CreateSessionResponse:
        if request.session in self._sessions:
            raise SessionExistsError(f"session {request.session} already exists")
        session = await self.sandbox.session(request.session)
        output = ""
        if request.startup_source:
            sources = " && ".join(f"source {shlex.quote(p)}" for p in request.startup_source)
            result = await session.run(sources, timeout_s=max(request.startup_timeout, 1.0))
            output = _clean(result.output)
        self._sessions[request.session] = session
        return CreateBashSessionResponse(output=output)

    async def run_in_session(self, action: Action) -> Observation:
        session = self._session(action.session)
        if isinstance(action, BashInterruptAction):
            # A command that timed out was interrupted by the daemon already; none runs now.
            return BashObservation(output="", exit_code=0)
        if action.is_interactive_command or action.is_interactive_quit:
            raise InteractiveCommandsUnsupported(
                f"interactive command {action.command!r}: Sandman's sessions run commands to "
                "completion (docs/integrations.md)"
            )
        if self.check_syntax:
            await self._check_syntax(action.command)
        timeout = action.timeout or UNBOUNDED_S
        try:
            result = await session.run(action.command, timeout_s=timeout)
        except NotFound as e:
            self._sessions.pop(action.session, None)
            raise SessionDoesNotExistError(f"session {action.session!r} does not exist") from e
        except Conflict as e:  # session_exited: its shell ran `exit`
            self._sessions.pop(action.session, None)
            raise SessionDoesNotExistError(f"session {action.session!r} has exited") from e
        if result.timed_out:
            raise CommandTimeoutError(
                f"timeout after {action.timeout} seconds while running command {action.command!r}"
            )
        return _observation(action, _clean(result.output), result.exit_code)

    async def _check_syntax(self, command: str) -> None:
        """``bash -n`` of the command, as SWE-ReX checks it before running it."""
        result = await self.sandbox.exec(
            ["/usr/bin/env", "bash", "-n"], stdin=command, timeout_s=30
        )
        if result.exit_code in (0, 126, 127):  # fine, or no bash to check with
            return
        message = (
            f"Error (exit code {result.exit_code}) while checking bash command \n{command!r}\n"
            f"---- Stderr ----\n{result.stderr}\n---- Stdout ----\n{result.stdout}"
        )
        extra = {"bash_stdout": result.stdout, "bash_stderr": result.stderr}
        raise BashIncorrectSyntaxError(message, extra_info=extra)

    async def close_session(self, request: CloseSessionRequest) -> CloseSessionResponse:
        session = self._session(request.session)
        del self._sessions[request.session]
        try:
            await session.close()
        except NotFound as e:
            raise SessionDoesNotExistError(f"session {request.session!r} does not exist") from e
        return CloseBashSessionResponse()

    def _session(self, name: str) -> AsyncSession:
        try:
            return self._sessions[name]
        except KeyError:
            raise SessionDoesNotExistError(f"session {name!r} does not exist") from None

    # --- commands and files ---------------------------------------------------------------
    async def execute(self, command: Command) -> CommandResponse:
        argv = _argv(command)
        if command.merge_output_streams:
            argv = [*_MERGE_STDERR, *argv]
        result = await self.sandbox.exec(
            argv, cwd=command.cwd, env=command.env, timeout_s=command.timeout or UNBOUNDED_S
        )
        if result.timed_out:
            raise CommandTimeoutError(
                f"Timeout ({command.timeout}s) exceeded while running command"
            )
        response = CommandResponse(
            stdout=result.stdout, stderr=result.stderr, exit_code=_exit_code(result)
        )
        if command.check and response.exit_code != 0:
            message = (
                f"Command {command.command!r} failed with exit code {response.exit_code}. "
                f"Stdout:\n{response.stdout!r}\nStderr:\n{response.stderr!r}"
            )
            raise NonZeroExitCodeError(_with_prefix(command.error_msg, message))
        return response

    async def read_file(self, request: ReadFileRequest) -> ReadFileResponse:
        try:
            data = await self.sandbox.files.read(request.path)
        except NotFound as e:
            raise FileNotFoundError(f"No such file: {request.path!r}") from e
        content = data.decode(request.encoding or "utf-8", request.errors or "strict")
        return ReadFileResponse(content=content)

    async def write_file(self, request: WriteFileRequest) -> WriteFileResponse:
        await self.sandbox.files.write(request.path, request.content)
        return WriteFileResponse()

    async def upload(self, request: UploadRequest) -> UploadResponse:
        source = Path(request.source_path)
        if source.is_dir():
            await self.sandbox.files.upload_dir(source, request.target_path)
        else:
            mode = source.stat().st_mode & 0o7777
            await self.sandbox.files.write(request.target_path, source.read_bytes(), mode=mode)
        return UploadResponse()

    async def close(self) -> CloseResponse:
        """Close the sessions this runtime opened (the sandbox is the deployment's)."""
        sessions, self._sessions = self._sessions, {}
        for name, session in sessions.items():
            try:
                await session.close()
            except SandmanError as e:
                self.logger.debug("closing session %s: %s", name, e)
        return CloseResponse()


def _observation(action: BashAction, output: str, exit_code: int | None) -> BashObservation:
    if action.check == "ignore":
        return BashObservation(output=output, exit_code=None)
    if action.check == "raise" and exit_code != 0:
        message = (
            f"Command {action.command!r} failed with exit code {exit_code}. "
            f"Here is the output:\n{output!r}"
        )
        raise NonZeroExitCodeError(_with_prefix(action.error_msg, message))
    return BashObservation(output=output, exit_code=exit_code)


def _argv(command: Command) -> list[str]:
    """``subprocess.run``'s reading of ``command``/``shell``."""
    if command.shell:
        parts = [command.command] if isinstance(command.command, str) else command.command
        return ["/bin/sh", "-c", *parts]
    return [command.command] if isinstance(command.command, str) else list(command.command)


def _exit_code(result: CommandResult) -> int | None:
    """``subprocess``'s: the exit status, or ``-n`` for a command killed by signal n."""
    if result.exit_code is not None:
        return result.exit_code
    try:
        return -signal.Signals[result.signal or ""].value
    except KeyError:
        return None


def _clean(output: str) -> str:
    """The terminal's output as SWE-ReX gives it: no ANSI escapes, ``\\n`` line ends."""
    return _ANSI.sub("", output).replace("\r\n", "\n")


def _bounded(timeout: float | None) -> Any:
    """``anyio.fail_after(timeout)``, or no bound for None."""
    return anyio.fail_after(timeout) if timeout else contextlib.nullcontext()


def _with_prefix(prefix: str, message: str) -> str:
    return f"{prefix}: {message}" if prefix else message
