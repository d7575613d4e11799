"""What tool calls return, as trainers use it: text first, bytes when needed, wire model kept.

The daemon sends output as a ``Blob``/``Output`` (UTF-8 text, or base64 when the bytes are not
valid UTF-8; never decoded lossily). A trainer feeding a model wants ``str``: the SDK decodes
(with replacement characters only when the bytes are not UTF-8) and keeps the exact bytes
(``stdout_bytes``) and the wire model (``raw``) alongside.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from typing import Literal

from sandman.wire.daemon import ExecEvent, ExecResult, Output, ProcessOutput, SessionRunResult

from .errors import ClientReason, CommandFailed

__all__ = [
    "CommandResult",
    "ProcessLogs",
    "SessionResult",
    "StreamEvent",
    "output_bytes",
    "output_text",
]


def output_bytes(output: Output) -> bytes:
    if output.encoding == "base64":
        return base64.b64decode(output.data)
    return output.data.encode()


def output_text(output: Output) -> str:
    if output.encoding == "base64":
        return base64.b64decode(output.data).decode(errors="replace")
    return output.data


@dataclass(frozen=True, slots=True)
class CommandResult:
    """The outcome of ``exec``: ``exit_code`` is None when the command was killed by a signal."""

    exit_code: int | None
    stdout: str
    stderr: str
    timed_out: bool
    signal: str | None
    duration_s: float
    #: Output beyond ``max_output_bytes`` was dropped (``raw`` has the totals).
    truncated: bool
    raw: ExecResult

    @classmethod
    def from_wire(cls, result: ExecResult) -> CommandResult:
        return cls(
            exit_code=result.exit_code,
            stdout=output_text(result.stdout),
            stderr=output_text(result.stderr),
            timed_out=result.timed_out,
            signal=result.signal,
            duration_s=result.duration_s,
            truncated=result.stdout.truncated or result.stderr.truncated,
            raw=result,
        )

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not self.timed_out

    @property
    def stdout_bytes(self) -> bytes:
        return output_bytes(self.raw.stdout)

    @property
    def stderr_bytes(self) -> bytes:
        return output_bytes(self.raw.stderr)

    def check(self) -> CommandResult:
        """Self if the command succeeded, else raise :class:`CommandFailed`."""
        if not self.ok:
            what = "timed out" if self.timed_out else f"exited with {self.exit_code}"
            raise CommandFailed(
                f"{what}; stderr: {self.stderr[-500:]!r}", reason=ClientReason.COMMAND_FAILED
            )
        return self


@dataclass(frozen=True, slots=True)
class SessionResult:
    """A command run in a session: ``output`` is the terminal's (stdout and stderr merged)."""

    exit_code: int | None
    output: str
    timed_out: bool
    duration_s: float
    session_alive: bool
    raw: SessionRunResult

    @classmethod
    def from_wire(cls, result: SessionRunResult) -> SessionResult:
        return cls(
            exit_code=result.exit_code,
            output=output_text(result.output),
            timed_out=result.timed_out,
            duration_s=result.duration_s,
            session_alive=result.session_alive,
            raw=result,
        )


@dataclass(frozen=True, slots=True)
class StreamEvent:
    """One event of ``exec_stream``: ``start``, ``stdout``/``stderr`` chunks, then ``exit``.

    ``exit`` carries ``result`` (its stdout/stderr are empty: the chunks were the output).
    """

    kind: Literal["start", "stdout", "stderr", "exit"]
    data: bytes = b""
    exec_id: str | None = None
    result: CommandResult | None = None

    @property
    def text(self) -> str:
        return self.data.decode(errors="replace")

    @classmethod
    def from_wire(cls, event: ExecEvent) -> StreamEvent:
        data = b""
        if event.data is not None:
            blob = Output(data=event.data, encoding=event.encoding or "utf-8", truncated=False,
                          total_bytes=0)  # fmt: skip
            data = output_bytes(blob)
        result = CommandResult.from_wire(event.result) if event.result is not None else None
        return cls(kind=event.event, data=data, exec_id=event.id, result=result)


@dataclass(frozen=True, slots=True)
class ProcessLogs:
    """The tail of a background process's output (the daemon keeps a ring buffer per stream)."""

    stdout: str
    stderr: str
    running: bool
    raw: ProcessOutput

    @classmethod
    def from_wire(cls, output: ProcessOutput) -> ProcessLogs:
        return cls(
            stdout=output_text(output.stdout),
            stderr=output_text(output.stderr),
            running=output.running,
            raw=output,
        )
