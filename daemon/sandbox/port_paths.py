"""Where a forwarded port request goes: the port, and the target its server is sent.

A trainer reaches a server it started inside a sandbox at ``/v1/sandboxes/{id}/ports/{port}/
<rest>`` on the facade, which sends it to the daemon's ``/v1/ports/{port}/<rest>``, which
sends ``/<rest>`` to the server. Both hops decide on the *raw* target with this one rule, so
the facade and the daemon cannot read a path differently:

- the port is ASCII decimal digits without a leading zero, 1 to 65535 (else 400
  ``invalid_port``), and never the daemon's own port (400 ``port_reserved``: that is the
  tool-call API, which has its own routes and checks);
- ``<rest>`` travels as the client encoded it (a server of the sandbox may want ``%2F`` in a
  segment), but no segment may be, once decoded, ``.`` or ``..``, nor hold a ``/``, a
  backslash or a NUL, and no segment but the last may be empty (400 ``invalid_path``).
  Dot-segments and encoded slashes are what a hop on the way resolves or decodes (yarl
  resolves dot-segments, a router decodes ``%2F``); refused, no reader can turn a port path
  into a tool-call path such as ``/v1/claim``.

The query string is kept as it came. Pure and small: the facade imports it (never the
daemon's server), the daemon's forwarder (``ports.py``) applies it again on arrival.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import unquote

from sandman.wire.errors import Reason

__all__ = ["PORTS_PREFIX", "PortPathError", "PortTarget", "port_target", "split_port"]

#: The daemon's route prefix of forwarded ports.
PORTS_PREFIX = "/v1/ports/"
MAX_PORT = 65535
_PORT = re.compile(r"[1-9][0-9]{0,4}")
_FORBIDDEN = ("/", "\\", "\x00")


class PortPathError(ValueError):
    """A port path refused: ``reason`` is the table's (``invalid_port``, ``port_reserved``,
    ``invalid_path``); each server raises it as its own error type."""

    def __init__(self, reason: Reason, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


@dataclass(frozen=True, slots=True)
class PortTarget:
    port: int
    #: The raw path and query the sandbox's server is sent: ``/`` + ``<rest>`` [``?query``].
    target: str


def split_port(raw_tail: str, *, reserved: int) -> PortTarget:
    """``<port>[/<rest>][?query]`` (raw, still encoded) → the port and the server's target."""
    path, mark, query = raw_tail.partition("?")
    port_text, _, rest = path.partition("/")
    if not _PORT.fullmatch(port_text) or int(port_text) > MAX_PORT:
        raise PortPathError(
            Reason.INVALID_PORT, f"port must be a decimal from 1 to {MAX_PORT}: {port_text!r}"
        )
    port = int(port_text)
    if port == reserved:
        raise PortPathError(
            Reason.PORT_RESERVED, f"port {port} is the sandbox daemon's own: use its tool calls"
        )
    _check_segments(rest)
    return PortTarget(port, "/" + rest + (mark + query if query else ""))


def port_target(raw_target: str, *, reserved: int) -> PortTarget:
    """The daemon's raw request target ``/v1/ports/<port>/<rest>?q`` → :class:`PortTarget`."""
    if not raw_target.startswith(PORTS_PREFIX):
        raise PortPathError(Reason.INVALID_PATH, f"not a port path: {raw_target!r}")
    return split_port(raw_target[len(PORTS_PREFIX) :], reserved=reserved)


def _check_segments(rest: str) -> None:
    segments = rest.split("/")
    for index, raw in enumerate(segments):
        decoded = unquote(raw, errors="replace")
        last = index == len(segments) - 1
        if (
            decoded in (".", "..")
            or any(c in decoded or c in raw for c in _FORBIDDEN)
            or (not raw and not last)
        ):
            raise PortPathError(
                Reason.INVALID_PATH,
                "a forwarded path's segments must not be `.` or `..`, hold `/`, `\\` or NUL "
                f"(percent-decoded once) or be empty before the last: {rest!r}",
            )
