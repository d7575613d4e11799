"""Bounded output capture and the bytes-to-JSON encoding rule.

However much a command prints, the daemon keeps at most a fixed number of bytes per stream: the
*head* for one-shot execs (what a person reading a log would see first) and the *tail* for
background processes (what is happening now). Pipes are always drained, so a chatty process
never blocks on a full pipe and never grows the daemon's memory.

Encoding rule (the API's contract): valid UTF-8 is sent as text (``encoding: "utf-8"``),
anything else as base64 (``encoding: "base64"``). A cut made by truncation never splits a
UTF-8 character, so truncating valid text keeps it valid text.
"""

from __future__ import annotations

import asyncio
import base64
import codecs
import os
from collections.abc import Callable

from sandman.wire.daemon import Encoding, Output

__all__ = ["HeadCapture", "PipeReader", "StreamDecoder", "TailBuffer", "encode_bytes"]

READ_SIZE = 64 * 1024


def encode_bytes(data: bytes) -> tuple[str, Encoding]:
    try:
        return data.decode("utf-8"), "utf-8"
    except UnicodeDecodeError:
        return base64.b64encode(data).decode("ascii"), "base64"


def _trim_partial_tail(data: bytes) -> bytes:
    """Drop an incomplete UTF-8 sequence at the end (at most 3 bytes)."""
    for back in range(1, min(4, len(data)) + 1):
        byte = data[-back]
        if byte & 0xC0 != 0x80:  # a lead byte (or ASCII): is its sequence complete?
            need = (
                1 if byte < 0x80 else 2 if byte >> 5 == 0b110 else 3 if byte >> 4 == 0b1110 else 4
            )
            return data if back >= need else data[:-back]
    return data


def _trim_partial_head(data: bytes) -> bytes:
    """Drop continuation bytes at the start (a tail cut inside a character)."""
    start = 0
    while start < min(3, len(data)) and data[start] & 0xC0 == 0x80:
        start += 1
    return data[start:]


class HeadCapture:
    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.total = 0
        self._buf = bytearray()

    def feed(self, data: bytes) -> None:
        self.total += len(data)
        room = self.cap - len(self._buf)
        if room > 0:
            self._buf += data[:room]

    def skip(self, count: int) -> None:
        """Count bytes that were produced but not kept (dropped upstream)."""
        self.total += count

    @property
    def truncated(self) -> bool:
        return self.total > len(self._buf)

    @property
    def room(self) -> int:
        return self.cap - len(self._buf)

    def output(self) -> Output:
        data = bytes(self._buf)
        if self.truncated:
            data = _trim_partial_tail(data)
        text, encoding = encode_bytes(data)
        return Output(
            data=text, encoding=encoding, truncated=self.truncated, total_bytes=self.total
        )


class TailBuffer:
    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.total = 0
        self._buf = bytearray()

    def feed(self, data: bytes) -> None:
        self.total += len(data)
        self._buf += data[-self.cap :]
        overflow = len(self._buf) - self.cap
        if overflow > 0:
            del self._buf[:overflow]

    def output(self, max_bytes: int | None = None) -> Output:
        data = bytes(self._buf)
        if max_bytes is not None and len(data) > max_bytes:
            data = data[len(data) - max_bytes :]
        truncated = len(data) < self.total
        if truncated:
            data = _trim_partial_head(data)
        text, encoding = encode_bytes(data)
        return Output(data=text, encoding=encoding, truncated=truncated, total_bytes=self.total)


class StreamDecoder:
    """Chunk-by-chunk encoding for streaming: text while the stream is valid UTF-8, a character
    split across two chunks is held back, and an invalid chunk goes out as base64."""

    def __init__(self) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")()
        self._pending = b""

    def encode(self, chunk: bytes, final: bool = False) -> tuple[str, Encoding] | None:
        raw = self._pending + chunk
        try:
            text = self._decoder.decode(chunk, final=final)
        except UnicodeDecodeError:
            self._decoder.reset()
            self._pending = b""
            return base64.b64encode(raw).decode("ascii"), "base64"
        held = self._decoder.getstate()[0]
        self._pending = held
        if not text:
            return None
        return text, "utf-8"


class PipeReader:
    """Reads a non-blocking pipe fd from the event loop, with pause/resume for backpressure."""

    def __init__(self, fd: int, on_data: Callable[[bytes], None]) -> None:
        self.fd = fd
        self._on_data = on_data
        self._loop = asyncio.get_running_loop()
        self.closed = self._loop.create_future()
        self._paused = False
        os.set_blocking(fd, False)
        self._loop.add_reader(fd, self._readable)

    def _readable(self) -> None:
        try:
            data = os.read(self.fd, READ_SIZE)
        except BlockingIOError:
            return
        except OSError:  # EIO on a pty whose other side is gone counts as EOF
            data = b""
        if data:
            self._on_data(data)
        else:
            self.close()

    def pause(self) -> None:
        if not self._paused and not self.closed.done():
            self._loop.remove_reader(self.fd)
            self._paused = True

    def resume(self) -> None:
        if self._paused and not self.closed.done():
            self._loop.add_reader(self.fd, self._readable)
            self._paused = False

    def detach(self) -> None:
        """Stop delivering data but keep draining until EOF, so writers never see EPIPE."""
        self._on_data = _discard
        self.resume()

    def close(self) -> None:
        if self.closed.done():
            return
        self._loop.remove_reader(self.fd)
        os.close(self.fd)
        self.closed.set_result(None)


def _discard(_: bytes) -> None:
    return None
