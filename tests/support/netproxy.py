"""A loopback TCP proxy a test can freeze or cut: the network partition of one client.

Frozen, it keeps accepting and reading but forwards nothing, like a dropped route: requests
through it hang until the client's own timeouts fire. Cut, every connection open at that
moment is closed at both ends, like a broken link; new ones pass. TLS passes through
untouched.
"""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path

import yaml

__all__ = ["FreezableProxy"]


class FreezableProxy:
    def __init__(self, target_host: str, target_port: int) -> None:
        self.target = (target_host, target_port)
        self.frozen = False
        self.cuts = 0
        self.port = 0
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._writers: set[asyncio.StreamWriter] = set()

    async def start(self) -> FreezableProxy:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        for w in self._writers:
            w.close()
        for t in self._tasks:
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()

    def cut(self) -> None:
        """Close every connection open now, both ends; later connections pass as before."""
        writers, self._writers = self._writers, set()
        for writer in writers:
            writer.close()
        self.cuts += 1

    def kubeconfig(self, original: Path, out: Path) -> Path:
        """A copy of ``original`` pointing at this proxy."""
        config = yaml.safe_load(original.read_text())
        config["clusters"][0]["cluster"]["server"] = f"https://127.0.0.1:{self.port}"
        out.write_text(yaml.safe_dump(config))
        return out

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.add(writer)
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.target)
        except OSError:
            writer.close()
            return
        self._writers.add(up_writer)
        for src, dst in ((reader, up_writer), (up_reader, writer)):
            task = asyncio.create_task(self._pipe(src, dst))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _pipe(self, src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
        with contextlib.suppress(OSError, asyncio.CancelledError):
            while data := await src.read(65536):
                if self.frozen:
                    continue  # swallowed: the partition
                dst.write(data)
                await dst.drain()
        dst.close()
