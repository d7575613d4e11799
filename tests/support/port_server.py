"""A small web server to run *inside* a sandbox: what an agent's web app is to a port test.

Standard library only (a sandbox sees the system's Python, not this checkout's packages), so
a test writes this file into the sandbox and starts it with ``python3 port_server.py PORT
HOST``. It answers:

- ``GET /download?bytes=N``: N bytes (``Content-Length``), for big answers;
- a WebSocket upgrade (any path): an echo (text as ``echo:<text>``, binary reversed), the
  first offered subprotocol chosen, pings answered, a close answered with the same code;
- anything else: JSON of what it saw (method, raw path, the headers, body length and
  SHA-256), for requests of every method and size (``Content-Length`` or chunked bodies).
"""

from __future__ import annotations

import base64
import hashlib
import json
import struct
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from io import BufferedIOBase

__all__ = ["Handler", "main"]

GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: object) -> None:  # quiet
        pass

    def do_GET(self) -> None:
        if self.headers.get("Upgrade", "").lower() == "websocket":
            self._websocket()
        elif self.path.startswith("/download?bytes="):
            size = int(self.path.split("=", 1)[1])
            self.send_response(200)
            self.send_header("Content-Length", str(size))
            self.end_headers()
            block = b"x" * 65536
            for start in range(0, size, len(block)):
                self.wfile.write(block[: size - start])
        else:
            self._echo()

    def _body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            parts = []
            while size := int(self.rfile.readline().split(b";")[0], 16):
                parts.append(self.rfile.read(size))
                self.rfile.readline()
            self.rfile.readline()
            return b"".join(parts)
        return self.rfile.read(int(self.headers.get("Content-Length") or 0))

    def _echo(self) -> None:
        body = self._body()
        seen = {
            "method": self.command,
            "path": self.path,
            "headers": {k.lower(): v for k, v in self.headers.items()},
            "length": len(body),
            "sha256": hashlib.sha256(body).hexdigest(),
        }
        answer = json.dumps(seen).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    do_POST = do_PUT = do_DELETE = do_PATCH = _echo

    def _websocket(self) -> None:
        key = self.headers["Sec-WebSocket-Key"].encode()
        accept = base64.b64encode(hashlib.sha1(key + GUID).digest()).decode()
        self.send_response(101)
        self.send_header("Upgrade", "websocket")
        self.send_header("Connection", "Upgrade")
        self.send_header("Sec-WebSocket-Accept", accept)
        offered = self.headers.get("Sec-WebSocket-Protocol")
        if offered:
            self.send_header("Sec-WebSocket-Protocol", offered.split(",")[0].strip())
        self.end_headers()
        self.wfile.flush()
        while (frame := _read_frame(self.rfile)) is not None:
            opcode, data = frame
            if opcode == 1:
                _write_frame(self.wfile, 1, b"echo:" + data)
            elif opcode == 2:
                _write_frame(self.wfile, 2, data[::-1])
            elif opcode == 9:
                _write_frame(self.wfile, 10, data)
            elif opcode == 8:
                _write_frame(self.wfile, 8, data[:2])
                break
        self.close_connection = True


def _read_frame(rfile: BufferedIOBase) -> tuple[int, bytes] | None:
    head = rfile.read(2)
    if len(head) < 2:
        return None
    opcode, length = head[0] & 0x0F, head[1] & 0x7F
    if length == 126:
        length = struct.unpack("!H", rfile.read(2))[0]
    elif length == 127:
        length = struct.unpack("!Q", rfile.read(8))[0]
    mask = rfile.read(4) if head[1] & 0x80 else b""
    data = rfile.read(length)
    if mask:
        data = bytes(b ^ mask[i % 4] for i, b in enumerate(data))
    return opcode, data


def _write_frame(wfile: BufferedIOBase, opcode: int, data: bytes) -> None:
    size = len(data)
    if size < 126:
        head = struct.pack("!BB", 0x80 | opcode, size)
    elif size < 65536:
        head = struct.pack("!BBH", 0x80 | opcode, 126, size)
    else:
        head = struct.pack("!BBQ", 0x80 | opcode, 127, size)
    wfile.write(head + data)
    wfile.flush()


def main() -> None:
    port, host = int(sys.argv[1]), sys.argv[2] if len(sys.argv) > 2 else "127.0.0.1"
    ThreadingHTTPServer((host, port), Handler).serve_forever()


if __name__ == "__main__":
    main()
