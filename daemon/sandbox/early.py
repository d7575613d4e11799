"""The readiness probe answered while the daemon is still importing.

Why: most of the daemon's start-up is Python importing asyncio, msgspec, h11, dataclasses and
the daemon's own modules, and every sandbox pays it on its way to Ready. Binding the listening
socket takes well under a millisecond. So ``__main__`` binds first, with nothing but modules
built into the interpreter (``_socket``, ``_thread``, ``select``: even ``socket`` costs ~10 ms
of imports, ``argparse`` ~15 ms, ``dataclasses`` ~40 ms on the reference machine), and an
``EarlyListener`` thread answers ``GET /healthz`` itself while the rest is imported. Every
other connection is left untouched — its bytes peeked at, never read — for the real server,
which adopts the listener and those connections once it runs (``HttpServer.start``). A
request sent during start-up is therefore neither refused nor lost: it waits in the kernel
until the real server reads it, as it would have waited in the backlog before, and h11 parses
it from its first byte.

What the thread answers is exactly what the server answers for the same request: a complete
``GET /healthz`` head (query allowed) without a body. Anything else — another path or method,
a body, a head split over several segments, a client that has sent nothing yet — is handed
over, so no behaviour of the server changes. It holds at most ``max_connections``
connections; newcomers beyond that wait in the backlog for the server.

Measured (docs/benchmarks/daemon.md, "Healthy before the imports"; 21 starts of each bundle
as PID 1 under bwrap, one sitting): start to the first ``/healthz`` 89 ms p50 / 103 ms p90
against 220 / 371 ms before, idle RSS 20.6 MiB against 20.4; the first ``/v1`` answer is
unchanged.
"""

from __future__ import annotations

import _socket
import _thread
import os
import select

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only: importing socket here would cost what we save
    import socket

__all__ = ["HEALTHY", "MAX_CONNECTIONS", "EarlyListener", "probe_head_length"]

HEALTHY = (
    b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 15\r\n"
    b"connection: close\r\n\r\n"
    b'{"status":"ok"}'
)
PEEK_BYTES = 4096
BACKLOG = 128
MAX_CONNECTIONS = 64  # held for the server at most; the server's own cap applies after

_PROBE_TARGETS = (b"GET /healthz ", b"GET /healthz?")
_BODY_HEADERS = (b"\r\ncontent-length:", b"\r\ntransfer-encoding:")


def probe_head_length(data: bytes) -> int:
    """The length of `data`'s head if it is a complete body-less ``GET /healthz``, else 0."""
    if not data.startswith(_PROBE_TARGETS):
        return 0
    end = data.find(b"\r\n\r\n")
    if end < 0:
        return 0
    head = data[: end + 2].lower()
    if any(name in head for name in _BODY_HEADERS):
        return 0
    return end + 4


def _bind(host: str, port: int) -> _socket.socket:
    """What ``socket.create_server((host, port), backlog=BACKLOG)`` does, from ``_socket``."""
    family = _socket.AF_INET6 if ":" in host else _socket.AF_INET
    sock = _socket.socket(family, _socket.SOCK_STREAM)
    try:
        sock.setsockopt(_socket.SOL_SOCKET, _socket.SO_REUSEADDR, 1)
        if family == _socket.AF_INET6:
            sock.setsockopt(_socket.IPPROTO_IPV6, _socket.IPV6_V6ONLY, 1)
        sock.bind((host, port))
        sock.listen(BACKLOG)
        sock.setblocking(False)
    except BaseException:
        sock.close()
        raise
    return sock


class EarlyListener:
    """Bind (host, port) and answer ``/healthz`` from a thread until `handover()`."""

    def __init__(self, host: str, port: int, max_connections: int = MAX_CONNECTIONS) -> None:
        self.address = (host, port)
        self._listener = _bind(host, port)
        self.port: int = self._listener.getsockname()[1]
        self._max_connections = max(1, max_connections)
        self._held: dict[int, _socket.socket] = {}  # accepted, not answered: for the server
        self._accepting = True
        self._wake_read, self._wake_write = os.pipe()
        self._finished = _thread.allocate_lock()
        self._finished.acquire()
        self.answered = 0
        #: Connections taken from the listener (answered, held or found closed).
        self.accepted = 0
        _thread.start_new_thread(self._run, ())

    def handover(self) -> tuple[socket.socket, list[socket.socket]]:
        """Stop the thread; return the listener and the connections it did not answer."""
        import socket  # loaded by now (asyncio imports it): free

        self._stop()
        held = [socket.socket(fileno=raw.detach()) for raw in self._held.values()]
        self._held = {}
        return socket.socket(fileno=self._listener.detach()), held

    def close(self) -> None:
        """Stop the thread and close everything (the address turned out not to be ours)."""
        self._stop()
        for raw in self._held.values():
            raw.close()
        self._held = {}
        self._listener.close()

    def _stop(self) -> None:
        os.write(self._wake_write, b"x")
        with self._finished:
            os.close(self._wake_read)
            os.close(self._wake_write)

    def _run(self) -> None:
        try:
            poller = select.poll()
            poller.register(self._wake_read, select.POLLIN)
            poller.register(self._listener.fileno(), select.POLLIN)
            while True:
                for fd, _ in poller.poll():
                    if fd == self._wake_read:
                        return
                    if fd == self._listener.fileno():
                        self._accept(poller)
                    else:
                        self._peek(poller, fd)
        finally:
            self._finished.release()

    def _accept(self, poller: select.poll) -> None:
        try:
            # _socket's accept (socket.socket.accept wraps it); typeshed leaves it out
            fd, _ = self._listener._accept()  # type: ignore[attr-defined]
        except OSError:  # gone before we took it, or out of descriptors: the server decides
            return
        self.accepted += 1
        self._held[fd] = _socket.socket(fileno=fd)
        poller.register(fd, select.POLLIN)
        if len(self._held) >= self._max_connections:
            poller.unregister(self._listener.fileno())
            self._accepting = False

    def _peek(self, poller: select.poll, fd: int) -> None:
        """Answer a complete probe, drop a client that left, hand anything else over unread
        (one look only: data we do not consume stays readable, so watching it would spin)."""
        poller.unregister(fd)
        sock = self._held[fd]
        try:
            data = sock.recv(PEEK_BYTES, _socket.MSG_PEEK | _socket.MSG_DONTWAIT)
            length = probe_head_length(data)
            if data and not length:
                return
            if length:
                sock.recv(length)
                sock.sendall(HEALTHY)
                self.answered += 1
        except OSError:
            pass  # a reset peer: the server would have dropped it too
        del self._held[fd]
        sock.close()
        if not self._accepting:
            poller.register(self._listener.fileno(), select.POLLIN)
            self._accepting = True
