"""Keep-alive idle times of every HTTP hop, defined once: clients let go first.

A pooled connection is closed by whichever end's idle timer fires first. If the server's
fires first, a client may send its next request on a connection the server is closing at
that moment: the request is lost in the race (a reset, or a silent close), and for a tool
call the client cannot tell whether the command ran. So on every hop the client's pool drops
an idle connection well before the server would:

    trainer SDK --(POOLED_IDLE_S)--> facade (FACADE_IDLE_S)
    facade proxy --(POOLED_IDLE_S)--> sandbox daemon (DAEMON_IDLE_S)

The daemon's is the longest: an agent's think time between two tool calls may be minutes,
and a connection the facade still pools must still be there. The SDK, the facade's proxy,
the facade server and the daemon take their defaults from here (tests/facade/test_keepalive.py
holds them together).
"""

from __future__ import annotations

from typing import Final

__all__ = ["DAEMON_IDLE_S", "FACADE_IDLE_S", "POOLED_IDLE_S"]

POOLED_IDLE_S: Final = 30.0
"""A client's pooled connection idle longer than this is closed by the client."""
FACADE_IDLE_S: Final = 90.0
"""The facade server closes a trainer's connection idle this long."""
DAEMON_IDLE_S: Final = 600.0
"""The sandbox daemon closes a connection idle this long."""
