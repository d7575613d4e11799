"""A scripted facade on loopback, on an event loop of its own thread.

For tests of what the SDK and the CLI *send*: every request is recorded (method, path,
body), and a route answers from a script — a fixed JSON answer, or a function of the request
body. It runs in a thread so that blocking callers (``Sandman``, the CLI's ``asyncio.run``)
and async ones can all talk to it, the way they talk to a real facade.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

__all__ = ["Answer", "Recorded", "ScriptedFacade", "scripted_facade"]

#: A route's answer: JSON, or JSON computed from the request's body.
Answer = Any | Callable[[bytes], Any]


@dataclass(frozen=True)
class Recorded:
    method: str
    path: str
    body: bytes


@dataclass
class ScriptedFacade:
    url: str = ""
    #: ``"METHOD /path"`` -> answer; a route not scripted is a 404.
    answers: dict[str, Answer] = field(default_factory=dict)
    seen: list[Recorded] = field(default_factory=list)

    def requests(self, key: str) -> list[Recorded]:
        return [r for r in self.seen if f"{r.method} {r.path}" == key]

    async def handle(self, request: web.Request) -> web.Response:
        body = await request.read()
        self.seen.append(Recorded(request.method, request.path, body))
        key = f"{request.method} {request.path}"
        if key not in self.answers:
            error = {"error": {"reason": "not_found", "message": f"not scripted: {key}"}}
            return web.json_response(error, status=404)
        answer = self.answers[key]
        return web.json_response(answer(body) if callable(answer) else answer)


@contextlib.contextmanager
def scripted_facade(answers: dict[str, Answer]) -> Iterator[ScriptedFacade]:
    facade = ScriptedFacade(answers=answers)
    loop = asyncio.new_event_loop()
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", facade.handle)
    runner = web.AppRunner(app)
    loop.run_until_complete(runner.setup())
    loop.run_until_complete(web.TCPSite(runner, "127.0.0.1", 0).start())
    facade.url = f"http://127.0.0.1:{runner.addresses[0][1]}"
    thread = threading.Thread(target=loop.run_forever, name="scripted-facade", daemon=True)
    thread.start()
    try:
        yield facade
    finally:
        asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()
