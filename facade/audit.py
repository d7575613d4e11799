"""The audit log: one JSON line per facade request — who did what, in which sandbox.

Why a log of its own: the point is accountability on a shared cluster (which tenant ran
which command in which sandbox, and when), which the metrics cannot say (their labels are
closed sets, never a sandbox id) and the process log should not (it is for operators
debugging the facade, at a level they change). So every request — refused ones included,
401s and 429s too — is one line on the logger ``sandman.facade.audit``, on by default, to
stderr or to a file (``--audit-file``), never propagated into the process log.

Each line (docs/operator-guide.md, "Audit log", lists the fields): ``time`` (UTC, RFC 3339,
when the request arrived), ``request_id`` (the caller's ``X-Request-Id`` if it sent a
printable one of at most 128 characters, else a fresh one; echoed in the answer), ``remote``,
``tenant`` (null before authentication), ``owner``, ``sandboxes`` (ids, at most
``MAX_IDS``; ``sandbox_count`` says how many), ``operation`` (the route row's name:
``create``, ``release``; a tool call's daemon operation: ``exec``, ``files_read``...),
``method``, ``status``, ``reason`` (the facade's own error reason; a daemon's answer passes
through unread, so null), ``bytes_in``, ``bytes_out``, ``duration_ms`` (a stream: until its
last byte), and for the operations that run a command (``COMMAND_OPERATIONS``) ``command``:
the argv joined shell-style or the command text, cut to ``--audit-command-bytes`` UTF-8 bytes
(``command_truncated`` says so).

What is never logged: the bearer token or any header, environment values (an exec's
``env`` carries credentials), ``stdin``, file contents, output. The command is logged on
purpose — "who ran what" is what an audit log is for — bounded, and only when its body has
a ``Content-Length`` within ``--audit-command-body-bytes`` (the facade reads such a body once
and forwards the same bytes; a larger or chunked body streams through unread, ``command``
null).
"""

from __future__ import annotations

import json
import logging
import secrets
import shlex
import sys
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from daemon.sandbox import api
from sandman.base.settings import setting

__all__ = [
    "AUDIT_LOGGER",
    "COMMAND_OPERATIONS",
    "AuditEntry",
    "AuditLog",
    "AuditSettings",
    "command_of",
]

AUDIT_LOGGER = "sandman.facade.audit"
#: Daemon operations whose JSON body names a command (``argv`` or ``command``).
COMMAND_OPERATIONS = frozenset(
    r.operation for r in (api.EXEC, api.EXEC_STREAM, api.SESSION_RUN, api.PROCESS_START)
)
MAX_IDS = 100
REQUEST_ID = "X-Request-Id"
_MAX_REQUEST_ID = 128


@dataclass(frozen=True, slots=True)
class AuditSettings:
    enabled: bool = setting(
        True, help="one JSON line per request on the logger sandman.facade.audit"
    )
    file: str | None = setting(
        None, help="append the audit lines to this file; none: stderr (a pod's log)"
    )
    command_bytes: int = setting(
        1024, help="an exec's command (argv or text) is logged cut to this many UTF-8 bytes"
    )
    command_body_bytes: int = setting(
        256 * 1024,
        help="a command operation's body is read (to log its command) only up to this size; "
        "larger or chunked bodies stream through and their command is not logged",
    )


@dataclass(slots=True)
class AuditEntry:
    """What one request's handlers learn about it, filled in as it goes."""

    started: float
    time: str
    request_id: str
    remote: str
    method: str
    operation: str = "unmatched"
    tenant: str | None = None
    owner: str | None = None
    sandboxes: list[str] = field(default_factory=list)
    reason: str | None = None
    command: str | None = None
    command_truncated: bool = False

    def line(self, status: int, bytes_in: int, bytes_out: int) -> str:
        ids = self.sandboxes
        record: dict[str, Any] = {
            "time": self.time,
            "request_id": self.request_id,
            "remote": self.remote,
            "tenant": self.tenant,
            "owner": self.owner,
            "sandboxes": ids[:MAX_IDS],
            "sandbox_count": len(ids),
            "operation": self.operation,
            "method": self.method,
            "status": status,
            "reason": self.reason,
            "bytes_in": bytes_in,
            "bytes_out": bytes_out,
            "duration_ms": round((time.perf_counter() - self.started) * 1000, 3),
        }
        if self.operation in COMMAND_OPERATIONS:
            record["command"] = self.command
            record["command_truncated"] = self.command_truncated
        return json.dumps(record, separators=(",", ":"))


def request_id(given: str | None) -> str:
    if given and len(given) <= _MAX_REQUEST_ID and given.isprintable() and given.isascii():
        return given
    return secrets.token_hex(8)


def command_of(body: bytes, limit: int) -> tuple[str | None, bool]:
    """The command a JSON body names, cut to ``limit`` bytes, and whether it was cut; None
    when the body names none (the daemon answers such a body 400 anyway)."""
    try:
        decoded = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        return None, False
    if not isinstance(decoded, dict):
        return None, False
    argv, text = decoded.get("argv"), decoded.get("command")
    if isinstance(argv, list) and all(isinstance(a, str) for a in argv):
        text = shlex.join(argv)
    if not isinstance(text, str):
        return None, False
    raw = text.encode("utf-8", "replace")
    if len(raw) <= limit:
        return text, False
    return raw[:limit].decode("utf-8", "ignore"), True


class AuditLog:
    """The logger and its handler, attached while the facade runs."""

    def __init__(self, settings: AuditSettings) -> None:
        self.settings = settings
        self.enabled = settings.enabled
        self.logger = logging.getLogger(AUDIT_LOGGER)
        self._handler: logging.Handler | None = None

    def start(self) -> None:
        if not self.enabled:
            return
        s = self.settings
        handler: logging.Handler = (
            logging.FileHandler(s.file, encoding="utf-8")
            if s.file
            else logging.StreamHandler(sys.stderr)
        )
        handler.setFormatter(logging.Formatter("%(message)s"))
        self.logger.addHandler(handler)
        self.logger.setLevel(logging.INFO)
        self.logger.propagate = False
        self._handler = handler

    def stop(self) -> None:
        if self._handler is not None:
            self.logger.removeHandler(self._handler)
            self._handler.close()
            self._handler = None

    def begin(self, remote: str, method: str, given_id: str | None) -> AuditEntry:
        return AuditEntry(
            started=time.perf_counter(),
            time=datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z"),
            request_id=request_id(given_id),
            remote=remote,
            method=method,
        )

    def write(self, entry: AuditEntry, status: int, bytes_in: int, bytes_out: int) -> None:
        if self.enabled:
            self.logger.info(entry.line(status, bytes_in, bytes_out))
