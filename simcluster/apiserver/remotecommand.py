"""``pods/exec`` and ``pods/attach`` over WebSocket: the channel protocol kubectl and the
official clients speak.

Why this protocol and only it: kubectl (1.30+) and client-go open exec and attach as a
WebSocket with the subprotocol ``v5.channel.k8s.io`` (offering ``v4.channel.k8s.io`` too),
and the Python client's ``stream()`` asks for ``v4.channel.k8s.io``. Both frame every
message as one byte naming a channel followed by its data: 0 stdin, 1 stdout, 2 stderr,
3 error (one ``metav1.Status`` JSON when the command ends: ``Success``, or ``Failure`` with
reason ``NonZeroExitCode`` and a cause ``ExitCode`` carrying the code, as the kubelet's
``remotecommand.ServeExec`` writes it), 4 resize (``{"Width": w, "Height": h}``). v5 adds
channel 255: the client closed one of its streams (the byte after it names which), which is
how ``kubectl exec -i`` ends a command's stdin without ending the session. SPDY (older
clients, and the fallback kubectl takes only when the WebSocket upgrade fails) is not
served: such a request gets a 400 that says so, as does a plain request without upgrade
headers (upstream: ``Upgrade request required``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Awaitable, Callable

import msgspec
from aiohttp import WSMsgType, web

from simcluster.apiserver.streams import ExecProcess, PodStream, PodStreams, serve_log
from simcluster.errors import BadRequest

__all__ = ["PROTOCOLS", "exit_status", "serve_exec", "serve_pod_stream"]

#: The subprotocols served, most preferred first.
PROTOCOLS = ("v5.channel.k8s.io", "v4.channel.k8s.io")
STDIN, STDOUT, STDERR, ERROR, RESIZE, CLOSE = 0, 1, 2, 3, 4, 255
#: How long output still in flight is read after the command exited (a background child
#: holding the pipe open must not hold the session).
DRAIN_S = 2.0


def exit_status(command: tuple[str, ...], code: int) -> dict[str, object]:
    """What the error channel carries when the command ends (upstream's field order)."""
    if code == 0:
        return {"metadata": {}, "status": "Success"}
    error = f"error executing command [{' '.join(command)}], exit code {code}"
    return {
        "metadata": {},
        "status": "Failure",
        "message": f"command terminated with non-zero exit code: {error}",
        "reason": "NonZeroExitCode",
        "details": {"causes": [{"reason": "ExitCode", "message": str(code)}]},
    }


def _check_upgrade(request: web.BaseRequest) -> None:
    upgrade = request.headers.get("Upgrade", "").lower()
    connection = request.headers.get("Connection", "").lower()
    if "upgrade" not in connection or not upgrade:
        raise BadRequest("Upgrade request required")


def _check_protocol(request: web.BaseRequest) -> None:
    if request.headers.get("Upgrade", "").lower() != "websocket":
        raise BadRequest(
            f"simcluster serves pods/exec and pods/attach over WebSocket only "
            f"({', '.join(PROTOCOLS)}), not {request.headers.get('Upgrade')}"
        )
    offered = {
        p.strip() for p in request.headers.get("Sec-WebSocket-Protocol", "").split(",") if p.strip()
    }
    if not offered & set(PROTOCOLS):
        raise BadRequest(
            f"none of the offered WebSocket subprotocols {sorted(offered)} is served; "
            f"simcluster speaks {', '.join(PROTOCOLS)}"
        )


async def serve_exec(
    request: web.BaseRequest, stream: PodStream, backend: PodStreams
) -> web.StreamResponse:
    """Upgrade, start the command in the container, relay the channels until it ends.
    Refusals come in upstream's order: no upgrade asked for (the API server's answer), then
    the node's (nothing runs there), then the protocol (here, SPDY: kubectl falls back to it
    when the WebSocket upgrade is refused, so the node's refusal must win to be seen)."""
    _check_upgrade(request)
    start = backend.attach(stream) if stream.subresource == "attach" else backend.exec(stream)
    _check_protocol(request)
    proc = await start()
    ws = web.WebSocketResponse(protocols=PROTOCOLS, max_msg_size=0)
    try:
        await ws.prepare(request)
    except BaseException:
        await proc.kill()
        raise
    await _Session(ws, proc, stream).run()
    return ws


class _Session:
    def __init__(self, ws: web.WebSocketResponse, proc: ExecProcess, stream: PodStream) -> None:
        self.ws = ws
        self.proc = proc
        self.stream = stream
        self.v5 = ws.ws_protocol == PROTOCOLS[0]

    async def run(self) -> None:
        pumps = []
        if self.stream.stdout:
            pumps.append(asyncio.create_task(self._pump(self.proc.read_stdout, STDOUT)))
        if self.stream.stderr:
            pumps.append(asyncio.create_task(self._pump(self.proc.read_stderr, STDERR)))
        client = asyncio.create_task(self._from_client())
        exited = asyncio.create_task(self.proc.wait())
        try:
            await self._relay(pumps, client, exited)
        except asyncio.CancelledError:  # the server stops, or the connection broke
            await asyncio.shield(self.proc.kill())
            raise
        finally:
            for task in (*pumps, client, exited):
                task.cancel()
            await asyncio.gather(*pumps, client, exited, return_exceptions=True)

    async def _relay(
        self, pumps: list[asyncio.Task[None]], client: asyncio.Task[None], exited: asyncio.Task[int]
    ) -> None:
        await asyncio.wait({client, exited}, return_when=asyncio.FIRST_COMPLETED)
        if not exited.done():  # the client went away: so does the command
            await self.proc.kill()
            return
        await self._drain(pumps)
        status = exit_status(self.stream.command, exited.result())
        with contextlib.suppress(ConnectionResetError):
            await self.ws.send_bytes(bytes([ERROR]) + msgspec.json.encode(status))
            await self.ws.close()

    async def _drain(self, pumps: list[asyncio.Task[None]]) -> None:
        if not pumps:
            return
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(DRAIN_S):
                await asyncio.gather(*pumps, return_exceptions=True)

    async def _pump(self, read: Callable[[], Awaitable[bytes]], channel: int) -> None:
        prefix = bytes([channel])
        while data := await read():
            await self.ws.send_bytes(prefix + data)

    async def _from_client(self) -> None:
        async for msg in self.ws:
            if msg.type == WSMsgType.BINARY:
                data: bytes = msg.data
            elif msg.type == WSMsgType.TEXT:  # the Python client frames stdin as text
                data = msg.data.encode()
            else:
                continue
            if data:
                await self._client_message(data[0], data[1:])

    async def _client_message(self, channel: int, data: bytes) -> None:
        if channel == STDIN and self.stream.stdin:
            await self.proc.write_stdin(data)
        elif channel == RESIZE and self.stream.tty:
            with contextlib.suppress(ValueError, KeyError, TypeError):
                size = json.loads(data)
                self.proc.resize(int(size["Width"]), int(size["Height"]))
        elif channel == CLOSE and self.v5 and data[:1] == bytes([STDIN]):
            self.proc.close_stdin()


async def serve_pod_stream(
    request: web.BaseRequest, stream: PodStream, backend: PodStreams | None
) -> web.StreamResponse:
    """The HTTP front end's one entry: a followed log, or an exec/attach session."""
    if backend is None:
        raise BadRequest(f"this server has no nodes to serve pods/{stream.subresource} from")
    if stream.subresource == "log":
        return await serve_log(request, stream, backend)
    return await serve_exec(request, stream, backend)
