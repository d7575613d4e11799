"""The limits of the facade's hop to the sandbox daemons, in a module of their own.

Both the tool-call proxy (proxy.py) and the forwarded ports (port_proxy.py) read them; here,
neither imports the other for them (the ports' proxy is part of the tool-call proxy, which
imports it: a circle otherwise).
"""

from __future__ import annotations

from dataclasses import dataclass

from sandman.base.settings import setting
from sandman.wire.keepalive import POOLED_IDLE_S

__all__ = ["ProxyLimits"]


@dataclass(frozen=True, slots=True)
class ProxyLimits:
    connect_timeout_s: float = setting(2.0, help="connecting to a sandbox's daemon")
    request_timeout_s: float = setting(
        3600.0,
        help="upper bound of one proxied call; exec timeouts are enforced inside the daemon",
    )
    per_pod_connections: int = setting(8, help="connections kept to one sandbox's daemon")
    total_connections: int = setting(8192, help="connections to daemons, all sandboxes together")
    keepalive_s: float = setting(
        POOLED_IDLE_S,
        help="an idle pooled connection to a daemon is closed after this: shorter than the "
        "daemon's keep-alive timeout, so this end lets go first",
    )
    websocket_message_bytes: int = setting(
        16 << 20,
        help="largest WebSocket message relayed through a forwarded port, either way "
        "(facade/port_proxy.py); a larger one closes the connection (1009)",
    )
