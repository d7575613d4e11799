"""Settings of one sandbox daemon: every limit in one frozen object, passed down explicitly.

Defaults suit a tiny sandbox (250m CPU / 512 MiB): bounded memory however much a command
prints, a bounded number of concurrent commands, and caps on request bodies.

Each field is a flag of ``sandman-daemon`` (``--max-upload-bytes``: the name with dashes,
:mod:`sandman.base.settings`), and those a pod spec sets are also read from
``SANDMAN_<NAME>`` (``SANDMAN_IDLE_TIMEOUT_S``): the bundle's argv is fixed
(daemon/sandbox/layout.py), so the environment is how the pod renderer configures a daemon.
The token is never a flag (``ps`` would show it): ``SANDMAN_TOKEN``, or a file — or, as a
sandbox pod carries it, only its verifier ``SANDMAN_TOKEN_SHA256`` (the token's SHA-256):
whoever reads the pod spec (the controller, an audit log) learns nothing that opens it.
"""

from __future__ import annotations

from dataclasses import dataclass

from sandman.base.settings import LOG_LEVELS, setting
from sandman.wire.keepalive import DAEMON_IDLE_S

from .layout import DAEMON_HOST, DAEMON_PORT, token_digest

__all__ = ["DaemonSettings", "ExtractLimits"]

MiB = 1024 * 1024


@dataclass(frozen=True, slots=True)
class DaemonSettings:
    ENV_PREFIX = "SANDMAN_"

    token: str | None = setting(
        None,
        help="the per-sandbox bearer token (removed from the environment before any command "
        "runs); give it or token_sha256",
        env=True,
        secret=True,
    )
    token_sha256: str | None = setting(
        None,
        help="the hex SHA-256 of the bearer token: the verifier a sandbox pod carries instead "
        "of the token (facade/podspec.py); give it or token",
        env=True,
    )
    host: str = setting(DAEMON_HOST, help="listen address", env=True)
    port: int = setting(DAEMON_PORT, help="listen port; 0 picks a free one", env=True)
    workdir: str | None = setting(
        None,
        help="directory relative paths and commands without a cwd resolve against (none: the "
        "daemon's cwd, the image's WORKDIR)",
        env=True,
    )
    run_dir: str | None = setting(
        None,
        help="scratch space for session command files (none: the first writable of "
        "/sandman-run, /tmp, /dev/shm, /run, /var/tmp)",
        env=True,
    )
    idle_timeout_s: float | None = setting(
        None,
        help="exit with status 0 after this long without an API call (never while a command "
        "or a streamed response runs); none: never",
        env=True,
    )
    pooled: bool = setting(
        False,
        help="a pool sandbox: the token is its announcement's pool token, and nothing but "
        "POST /v1/claim is served until a claim gives it its own (daemon/sandbox/claim.py)",
        env=True,
    )
    log_level: str = setting("INFO", help="logging level", env=True, choices=LOG_LEVELS)
    max_json_body_bytes: int = setting(16 * MiB, help="JSON request bodies; beyond: 413")
    max_upload_bytes: int = setting(
        1024 * MiB,
        help="a file or tar upload's body as sent (compressed, for a compressed tar); beyond: 413",
    )
    max_extract_bytes: int = setting(
        1024 * MiB,
        help="a tar upload's members' data once decompressed; beyond: 413 archive_too_large, "
        "nothing kept",
    )
    max_archive_members: int = setting(100_000, help="members of one tar upload")
    max_concurrent_execs: int = setting(
        64,
        help="commands running at once (execs, streamed execs and session commands, each "
        "counted from before its response starts); beyond: 429 too_many_execs",
    )
    default_output_bytes: int = setting(
        1 * MiB, help="output an exec or session command keeps when the call names no cap"
    )
    max_output_bytes: int = setting(16 * MiB, help="the largest output cap a call may ask for")
    process_tail_bytes: int = setting(256 * 1024, help="output a background process keeps")
    max_processes: int = setting(256, help="background-process records; beyond: 429")
    max_sessions: int = setting(32, help="shell sessions; beyond: 429")
    session_buffer_bytes: int = setting(
        256 * 1024,
        help="terminal output a session keeps while no command collects it (oldest dropped)",
    )
    max_dir_entries: int = setting(
        10_000, help="entries one directory listing returns (more: truncated)"
    )
    max_connections: int = setting(
        256,
        help="client connections at once (also at most a quarter of RLIMIT_NOFILE); at the "
        "cap a new one evicts the longest-idle, with none idle its request gets 503 "
        "too_many_connections; /healthz keeps answering",
    )
    keepalive_timeout_s: float = setting(
        DAEMON_IDLE_S,
        help="how long a kept-alive connection may idle between requests: longer than an "
        "agent's think time, so a pooled connection is still there for the next tool call; "
        "clients and proxies close their idle ones sooner (sandman.wire.keepalive)",
    )
    header_timeout_s: float = setting(
        10.0,
        help="a request's head must arrive within this, from its first byte (or the accept); "
        "else 408 header_timeout",
    )
    body_timeout_s: float = setting(
        30.0, help="a request body may pause at most this long between reads; else 408"
    )
    send_timeout_s: float = setting(
        60.0, help="a response write may stall at most this long (a client that stopped reading)"
    )
    exec_retention_s: float = setting(
        600.0,
        help="how long an exec that carried an id keeps its result (a stream: its events) "
        "after it ends, for a caller whose connection broke to re-attach instead of running "
        "it again",
    )
    max_retained_execs: int = setting(256, help="execs kept under their id at once")
    max_retained_exec_bytes: int = setting(
        64 * MiB,
        help="kept results and stream events, all execs together (the oldest ended go first)",
    )
    exec_detach_grace_s: float = setting(
        60.0,
        help="a kept streamed exec whose every reader hung up is killed if none re-attaches "
        "within this (a stream without an id is killed at once)",
    )
    stream_drain_s: float = setting(
        0.25, help="after a command exits, how long to keep reading output its children write"
    )
    shutdown_grace_s: float = setting(
        2.0, help="at exit, how long children get between SIGTERM and SIGKILL"
    )

    def __post_init__(self) -> None:
        if self.idle_timeout_s is not None and not self.idle_timeout_s > 0:
            raise ValueError("idle_timeout_s must be > 0 (none: never)")
        if (self.token is None) == (self.token_sha256 is None):
            raise ValueError(
                "give the token (SANDMAN_TOKEN) or its verifier (SANDMAN_TOKEN_SHA256)"
            )
        if self.token is not None and not self.token.strip():
            raise ValueError("the token is empty")
        if self.token_sha256 is not None:
            text = self.token_sha256.strip().lower()
            if len(text) != 64 or any(c not in "0123456789abcdef" for c in text):
                raise ValueError("token_sha256 must be 64 hex digits (a SHA-256)")

    def verifier(self) -> bytes:
        """The digest a caller's token must match (daemon/sandbox/claim.py)."""
        if self.token_sha256 is not None:
            return bytes.fromhex(self.token_sha256.strip())
        assert self.token is not None
        return token_digest(self.token)


@dataclass(frozen=True, slots=True)
class ExtractLimits:
    """What one tar upload may hold (from ``DaemonSettings``)."""

    max_bytes: int
    max_members: int
