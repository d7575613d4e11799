"""Real sandbox daemons (``python -m daemon.sandbox``) started as separate processes on
loopback, as the local stack starts them."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence

from devstack.launcher import LocalDaemon, start_local_daemon

__all__ = ["DaemonProcess", "start_daemon"]

DaemonProcess = LocalDaemon


def start_daemon(
    args: Sequence[str] = (),
    *,
    prefix: Sequence[str] = (),
    cwd: str | None = None,
    preexec_fn: Callable[[], None] | None = None,
    verifier_only: bool = False,
) -> LocalDaemon:
    """Start ``python -m daemon.sandbox`` on a free loopback port and wait until it listens
    (``verifier_only``: given the token's SHA-256 only, as a sandbox pod starts it)."""
    return start_local_daemon(
        cwd or os.getcwd(), args, prefix=prefix, preexec_fn=preexec_fn, verifier_only=verifier_only
    )
