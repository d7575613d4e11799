"""A one-line progress bar on stderr for the long phases of the burst benchmark.

Why hand-made: the project's rule is that every long-running command shows progress, and a
dependency (tqdm) for one line is not worth it. On a terminal the line is redrawn in place;
otherwise (CI logs, files) a full line is written every ``log_every_s`` so logs stay short.
"""

from __future__ import annotations

import sys
import time
from typing import TextIO

__all__ = ["Progress", "say"]


def say(msg: str, stream: TextIO | None = None) -> None:
    """A timestamped status line."""
    out = stream or sys.stderr
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=out, flush=True)


class Progress:
    """``update(done, detail)`` as often as you like; ``close()`` ends the line."""

    def __init__(
        self,
        label: str,
        total: int,
        *,
        stream: TextIO | None = None,
        width: int = 30,
        log_every_s: float = 5.0,
    ) -> None:
        self.label = label
        self.total = max(total, 1)
        self._out = stream or sys.stderr
        self._tty = self._out.isatty()
        self._width = width
        self._every = 0.2 if self._tty else log_every_s
        self._start = time.monotonic()
        self._last = -1e9
        self._line = ""

    def update(self, done: int, detail: str = "", *, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self._last < self._every:
            return
        self._last = now
        frac = min(1.0, done / self.total)
        bar = "#" * int(frac * self._width)
        self._line = (
            f"{self.label} [{bar:<{self._width}}] {done:,}/{self.total:,} "
            f"{now - self._start:6.1f} s {detail}"
        )
        if self._tty:
            self._out.write("\r" + self._line + "\x1b[K")
            self._out.flush()
        else:
            say(self._line, self._out)

    def close(self, done: int, detail: str = "") -> None:
        self.update(done, detail, force=True)
        if self._tty:
            self._out.write("\n")
            self._out.flush()
