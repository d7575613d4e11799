"""Start a sandbox daemon as a local child process (demo, benchmarks, tests).

The daemon prints ``sandman-daemon listening on HOST:PORT`` once it accepts connections; the
launcher waits for that line, so ``--port 0`` (a free port) works and start-up time is
measured from ``exec`` to "listening".
"""

from __future__ import annotations

import os
import secrets
import select
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from daemon.sandbox.layout import token_digest

__all__ = ["LocalDaemon", "start_local_daemon"]


@dataclass
class LocalDaemon:
    proc: subprocess.Popen[bytes]
    url: str
    token: str
    startup_s: float

    def stop(self, timeout_s: float = 10.0) -> int:
        """SIGTERM, wait (KILL after ``timeout_s``); the exit code."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            code = self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            code = self.proc.wait()
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        return code


def start_local_daemon(
    workdir: str,
    args: Sequence[str] = (),
    *,
    token: str | None = None,
    verifier_only: bool = False,
    prefix: Sequence[str] = (),
    host: str = "127.0.0.1",
    preexec_fn: Callable[[], None] | None = None,
    ready_timeout_s: float = 20.0,
) -> LocalDaemon:
    token = token or secrets.token_hex(16)
    # As a sandbox pod starts it (facade/podspec.py): the verifier only, never the token.
    credential = (
        ("SANDMAN_TOKEN_SHA256", token_digest(token).hex())
        if verifier_only
        else ("SANDMAN_TOKEN", token)
    )
    env = {**os.environ, credential[0]: credential[1], "SANDMAN_LOG_LEVEL": "WARNING"}
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # use cached bytecode: start-up is measured
    argv = [*prefix, sys.executable, "-m", "daemon.sandbox", "--host", host, "--port", "0", *args]
    started = time.monotonic()
    proc = subprocess.Popen(
        argv, stdout=subprocess.PIPE, env=env, cwd=workdir, preexec_fn=preexec_fn
    )
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], ready_timeout_s)
    line = proc.stdout.readline().decode() if ready else ""
    if "listening on" not in line:
        proc.kill()
        proc.wait()
        proc.stdout.close()
        raise RuntimeError(f"sandbox daemon did not start: {line!r}")
    port = int(line.rsplit(":", 1)[1])
    return LocalDaemon(proc, f"http://{host}:{port}", token, time.monotonic() - started)
