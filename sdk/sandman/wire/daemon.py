"""Wire models of the sandbox daemon API: one request and one response type per operation.

msgspec Structs give validation, fast JSON and JSON Schema (from which the OpenAPI document in
``docs/openapi/daemon.json`` is generated) from one definition. Requests forbid unknown fields
so a typo in a trainer's call is a 400, not a silently ignored option.

Bytes that may not be UTF-8 (process output, stdin) travel as ``Blob``: ``encoding`` is
``"utf-8"`` when the bytes are valid UTF-8 (``data`` is then the text itself) and ``"base64"``
otherwise. Output is never lossy-decoded. File names follow the same rule: a Linux name is
bytes, so an answer carrying a name that is not valid UTF-8 says ``name_encoding`` /
``path_encoding: "base64"`` and carries the base64 of the bytes (a ``MoveRequest`` may do the
same with ``encoding``; in queries, paths are percent-encoded bytes).
"""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec
from msgspec import Meta, Struct

__all__ = [
    "Blob",
    "ClaimRequest",
    "DaemonInfo",
    "DirEntry",
    "DirListing",
    "Encoding",
    "ExecEvent",
    "ExecRequest",
    "ExecResult",
    "FileStat",
    "MoveRequest",
    "Output",
    "ProcessInfo",
    "ProcessList",
    "ProcessOutput",
    "ProcessStartRequest",
    "ProcessWaitRequest",
    "ResourceLimits",
    "ResourceUsage",
    "SessionCreateRequest",
    "SessionInfo",
    "SessionList",
    "SessionRunRequest",
    "SessionRunResult",
    "SignalRequest",
]

Encoding = Literal["utf-8", "base64"]
Seconds = Annotated[float, Meta(gt=0, le=7 * 24 * 3600)]
Grace = Annotated[float, Meta(ge=0, le=600)]
ByteCap = Annotated[int, Meta(ge=0)]
Name = Annotated[str, Meta(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$")]
SignalName = Annotated[str, Meta(pattern=r"^(SIG)?[A-Z0-9]{2,8}$|^[0-9]{1,2}$")]


class _Request(Struct, forbid_unknown_fields=True, frozen=True, kw_only=True):
    pass


class ClaimRequest(_Request, frozen=True):
    """A pool sandbox's claim (``POST /v1/claim``, the facade's call, never proxied): the
    claim's ``token`` replaces the pool token for every later call, ``env`` is merged into
    every later exec, session and process, ``idle_timeout_s`` starts counting now.
    ``claim`` names the claim (its SandboxClaim): the same claim repeated is accepted, any
    other refused."""

    claim: Name
    token: Annotated[str, Meta(min_length=16, max_length=512)]
    env: dict[str, str] = {}
    idle_timeout_s: Seconds | None = None


class Blob(Struct, frozen=True, kw_only=True):
    data: str
    encoding: Encoding = "utf-8"


class Output(Struct, frozen=True, kw_only=True):
    """Captured output of one stream: the first ``max_output_bytes`` bytes."""

    data: str
    encoding: Encoding
    truncated: bool
    total_bytes: int


class ExecRequest(_Request, frozen=True):
    """Run one command to completion. Exactly one of ``argv`` and ``command`` is given.

    ``id`` names the call: while it runs and for a while after, the same request under the
    same id re-attaches to its one run instead of running again (a stream resumes with
    ``?resume_from=N``); another request under it is a 409 ``exec_id_reused``."""

    argv: list[str] | None = None
    command: str | None = None
    shell: str = "/bin/sh"
    cwd: str | None = None
    env: dict[str, str] = {}
    stdin: Blob | None = None
    timeout_s: Seconds = 60.0
    kill_grace_s: Grace = 2.0
    max_output_bytes: ByteCap | None = None
    id: Name | None = None


class ExecResult(Struct, frozen=True, kw_only=True):
    id: str
    exit_code: int | None
    signal: str | None
    timed_out: bool
    interrupted: bool
    duration_s: float
    stdout: Output
    stderr: Output
    spawn_error: str | None = None


class ExecEvent(Struct, frozen=True, kw_only=True, omit_defaults=True):
    """One line of the streaming exec response (NDJSON).

    ``event`` is ``start`` (carries ``id``), ``stdout``/``stderr`` (carry ``data`` and
    ``encoding``), then exactly one ``exit`` (carries ``result`` with empty outputs that only
    report totals and truncation).
    """

    event: Literal["start", "stdout", "stderr", "exit"]
    id: str | None = None
    data: str | None = None
    encoding: Encoding | None = None
    result: ExecResult | None = None


class SignalRequest(_Request, frozen=True):
    signal: SignalName = "SIGINT"


class SessionCreateRequest(_Request, frozen=True):
    name: Name
    shell: str | None = None
    cwd: str | None = None
    env: dict[str, str] = {}


class SessionInfo(Struct, frozen=True, kw_only=True):
    name: str
    shell: str
    pid: int
    alive: bool
    busy: bool
    commands_run: int
    created_at: float


class SessionList(Struct, frozen=True, kw_only=True):
    sessions: list[SessionInfo]


class SessionRunRequest(_Request, frozen=True):
    command: str
    timeout_s: Seconds = 60.0
    kill_grace_s: Grace = 2.0
    max_output_bytes: ByteCap | None = None


class SessionRunResult(Struct, frozen=True, kw_only=True):
    """Output is the terminal's (stdout and stderr interleaved, as a person would see it)."""

    exit_code: int | None
    timed_out: bool
    duration_s: float
    output: Output
    session_alive: bool


class ProcessStartRequest(_Request, frozen=True):
    argv: list[str] | None = None
    command: str | None = None
    shell: str = "/bin/sh"
    cwd: str | None = None
    env: dict[str, str] = {}
    name: Name | None = None


class ProcessInfo(Struct, frozen=True, kw_only=True):
    id: str
    name: str | None
    argv: list[str]
    pid: int
    running: bool
    exit_code: int | None
    signal: str | None
    started_at: float
    ended_at: float | None
    stdout_bytes: int
    stderr_bytes: int


class ProcessList(Struct, frozen=True, kw_only=True):
    processes: list[ProcessInfo]


class ProcessOutput(Struct, frozen=True, kw_only=True):
    """The tail of a background process's output (bounded ring buffer per stream)."""

    id: str
    running: bool
    stdout: Output
    stderr: Output


class ProcessWaitRequest(_Request, frozen=True):
    timeout_s: Seconds = 60.0


class FileStat(Struct, frozen=True, kw_only=True):
    path: str
    type: Literal["file", "directory", "symlink", "other"]
    size: int
    mode: int
    mtime: float
    uid: int
    gid: int
    link_target: str | None = None
    path_encoding: Encoding = "utf-8"
    """``base64``: ``path`` and ``link_target`` are the base64 of names that are not UTF-8."""


class DirEntry(Struct, frozen=True, kw_only=True):
    name: str
    type: Literal["file", "directory", "symlink", "other"]
    size: int
    mode: int
    mtime: float
    name_encoding: Encoding = "utf-8"
    """``base64``: ``name`` is the base64 of a name that is not UTF-8."""


class DirListing(Struct, frozen=True, kw_only=True):
    path: str
    entries: list[DirEntry]
    truncated: bool
    path_encoding: Encoding = "utf-8"


class MoveRequest(_Request, frozen=True):
    source: str
    destination: str
    overwrite: bool = False
    encoding: Encoding = "utf-8"
    """``base64``: ``source`` and ``destination`` are the base64 of the paths' bytes."""


class ResourceLimits(Struct, frozen=True, kw_only=True):
    cgroup_version: Literal[1, 2] | None
    memory_bytes: int | None
    cpu_cores: float | None
    pids: int | None


class ResourceUsage(Struct, frozen=True, kw_only=True):
    memory_bytes: int | None
    cpu_seconds: float | None
    pids: int | None
    daemon_rss_bytes: int


class DaemonInfo(Struct, frozen=True, kw_only=True):
    version: str
    pid: int
    is_pid1: bool
    uptime_s: float
    idle_s: float
    idle_timeout_s: float | None
    running_execs: int
    sessions: int
    processes: int
    orphans_reaped: int
    limits: ResourceLimits
    usage: ResourceUsage


def encode(value: object) -> bytes:
    return msgspec.json.encode(value)
