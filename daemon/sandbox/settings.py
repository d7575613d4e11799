"""Settings of one sandbox daemon: every limit in one frozen object, passed down explicitly.

Defaults suit a tiny sandbox (250m CPU / 512 MiB): bounded memory however much a command
prints, a bounded number of concurrent commands, and caps on request bodies.
"""

from __future__ import annotations

from dataclasses import dataclass

from sandman.wire.keepalive import DAEMON_IDLE_S

from .layout import DAEMON_HOST, DAEMON_PORT

__all__ = ["DaemonSettings", "ExtractLimits"]

MiB = 1024 * 1024


@dataclass(frozen=True, slots=True)
class DaemonSettings:
    token: str
    host: str = DAEMON_HOST
    port: int = DAEMON_PORT
    workdir: str | None = None
    """Directory relative file paths resolve against (default: the daemon's cwd)."""
    run_dir: str | None = None
    """Scratch directory for session command files (default: first writable of a few)."""
    idle_timeout_s: float | None = None
    """Exit cleanly after this long without an API call (None: never)."""
    max_json_body_bytes: int = 16 * MiB
    max_upload_bytes: int = 1024 * MiB
    """A file or tar upload's body, as sent (compressed, for a compressed tar)."""
    max_extract_bytes: int = 1024 * MiB
    """A tar upload's members' data once decompressed."""
    max_archive_members: int = 100_000
    max_concurrent_execs: int = 64
    default_output_bytes: int = 1 * MiB
    max_output_bytes: int = 16 * MiB
    process_tail_bytes: int = 256 * 1024
    max_processes: int = 256
    max_sessions: int = 32
    session_buffer_bytes: int = 256 * 1024
    """Terminal output a session keeps while no command collects it (oldest dropped)."""
    max_dir_entries: int = 10_000
    max_connections: int = 256
    """Client connections at once (also at most a quarter of RLIMIT_NOFILE); at the cap a new
    connection evicts the longest-idle one."""
    keepalive_timeout_s: float = DAEMON_IDLE_S
    """How long a kept-alive connection may idle between requests: longer than an agent's
    think time, so a pooled connection is still there for the next tool call. Clients and
    proxies close their idle pooled connections sooner (sandman.wire.keepalive)."""
    header_timeout_s: float = 10.0
    """A request's head must arrive within this, from its first byte (or from the accept)."""
    body_timeout_s: float = 30.0
    """A request body may pause at most this long between reads."""
    send_timeout_s: float = 60.0
    """A response write may stall at most this long (a client that stopped reading)."""
    exec_retention_s: float = 600.0
    """How long an exec that carried an ``id`` keeps its result (a stream: its events) after
    it ends, for a caller whose connection broke to re-attach instead of running it again."""
    max_retained_execs: int = 256
    max_retained_exec_bytes: int = 64 * MiB
    """Kept results and stream events, all execs together (the oldest ended go first)."""
    exec_detach_grace_s: float = 60.0
    """A kept streamed exec whose every reader hung up is killed if none re-attaches within
    this (a stream without an id is killed at once)."""
    stream_drain_s: float = 0.25
    """After a command exits, how long to keep reading output its children still write."""
    shutdown_grace_s: float = 2.0


@dataclass(frozen=True, slots=True)
class ExtractLimits:
    """What one tar upload may hold (from ``DaemonSettings``)."""

    max_bytes: int
    max_members: int
