"""A protocol-level stand-in for the sandbox daemon, on the ``virtual`` runtime's pods.

Why: the reference burst runs 11,858 pods on the ``virtual`` runtime, which runs nothing, so
a pool pod there has no daemon to take its claim (``POST /v1/claim``) and a pooled burst
could not be measured at scale. A node with ``virtual_daemon`` on gives each pod that carries
the daemon's credentials (its ``SANDMAN_TOKEN_SHA256`` or ``SANDMAN_TOKEN`` env) a listener
on ``<podIP>:<its readiness httpGet port>`` from the pod's start until its stop, answering
the daemon's protocol for what a claim needs — behaviour as data, in the spirit of KWOK:

- ``/healthz`` 200 before any authentication;
- a bearer token on everything else (401 ``missing_token`` / ``invalid_token`` with the
  daemon's ``www-authenticate``), compared by SHA-256 digest;
- ``POST /v1/claim`` with the daemon's rules: a pool pod (``SANDMAN_POOLED``) takes one claim
  (the same claim again: 204; another: 409 ``already_claimed``), a cold pod refuses every
  claim, malformed bodies answered 400 ``invalid_json`` / ``invalid_request`` /
  ``invalid_env``;
- the daemon's other routes (``DAEMON_ROUTES``): 409 ``sandbox_unclaimed`` before a pool
  pod's claim, 501 ``not_simulated`` after (tool calls are not simulated: nothing runs);
  unknown paths 404 ``no_such_endpoint``, a known path with another method 405.

simcluster imports nothing of Sandman, so the rules are written here once more;
tests/integration/test_stand_in_conformance.py runs one conversation against the real daemon
and this stand-in and holds the two to the same statuses, reasons and route table.

One aiohttp low-level ``web.Server`` per pod on one ``loop.create_server`` listener: aiohttp
is already simcluster's HTTP server, and its low-level server skips the Application/Runner
machinery (measured with ``python -m load.bench.stand_in``: see BENCHMARKS.md for the cost
of 12k listeners).
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import logging
import re
import resource
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated

import msgspec
from aiohttp import web

from simcluster.kubelet.runtime import RuntimeStartError, Sandbox, VirtualRuntime

__all__ = [
    "CLAIM",
    "DAEMON_ROUTES",
    "ENV_POOLED",
    "ENV_TOKEN",
    "ENV_VERIFIER",
    "PORTS_PREFIX",
    "REASON_STATUS",
    "StandInDaemon",
    "StandInRuntime",
    "raise_open_file_limit",
]

log = logging.getLogger(__name__)

ENV_TOKEN, ENV_VERIFIER, ENV_POOLED = "SANDMAN_TOKEN", "SANDMAN_TOKEN_SHA256", "SANDMAN_POOLED"
_TRUE = ("1", "true", "yes", "on")
CLAIM = ("POST", "/v1/claim")
#: The daemon's route table (method, path template), for 404 versus 405 and for which
#: routes are the daemon's at all; held to daemon/sandbox/api.py by the conformance test.
DAEMON_ROUTES: tuple[tuple[str, str], ...] = (
    ("GET", "/v1/info"),
    CLAIM,
    ("POST", "/v1/exec"),
    ("POST", "/v1/exec/stream"),
    ("POST", "/v1/exec/{id}/signal"),
    ("GET", "/v1/sessions"),
    ("POST", "/v1/sessions"),
    ("POST", "/v1/sessions/{name}/run"),
    ("DELETE", "/v1/sessions/{name}"),
    ("GET", "/v1/processes"),
    ("POST", "/v1/processes"),
    ("GET", "/v1/processes/{id}"),
    ("GET", "/v1/processes/{id}/output"),
    ("POST", "/v1/processes/{id}/signal"),
    ("POST", "/v1/processes/{id}/wait"),
    ("DELETE", "/v1/processes/{id}"),
    ("GET", "/v1/files"),
    ("PUT", "/v1/files"),
    ("DELETE", "/v1/files"),
    ("GET", "/v1/files/stat"),
    ("GET", "/v1/files/list"),
    ("POST", "/v1/files/move"),
    ("GET", "/v1/files/archive"),
    ("PUT", "/v1/files/archive"),
)
#: The daemon's forwarded ports (daemon/sandbox/ports.py), matched by prefix before its
#: route table: not simulated either (nothing listens inside a virtual pod).
PORTS_PREFIX = "/v1/ports/"
_PATTERNS = tuple(
    (method, re.compile("^" + re.sub(r"\{\w+\}", "[^/]+", path) + "$"))
    for method, path in DAEMON_ROUTES
)
_SHUTDOWN_S = 0.1  # what a pod's connections get to finish when it stops
_MAX_BODY = 16 * 1024 * 1024  # the daemon's max_json_body_bytes default
#: The status of each reason the stand-in answers (the daemon's, sandman.wire.errors).
REASON_STATUS = {
    "missing_token": 401, "invalid_token": 401, "sandbox_unclaimed": 409,
    "already_claimed": 409, "method_not_allowed": 405, "no_such_endpoint": 404,
    "invalid_json": 400, "invalid_request": 400, "invalid_env": 400, "body_too_large": 413,
    "not_simulated": 501,
}  # fmt: skip


class _Claim(msgspec.Struct, forbid_unknown_fields=True, frozen=True, kw_only=True):
    """The daemon's ``ClaimRequest`` as the stand-in decodes it."""

    claim: Annotated[str, msgspec.Meta(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$")]
    token: Annotated[str, msgspec.Meta(min_length=16, max_length=512)]
    env: dict[str, str] = {}
    idle_timeout_s: Annotated[float, msgspec.Meta(gt=0, le=7 * 24 * 3600)] | None = None


class _Refused(Exception):
    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason, self.message = reason, message

    def response(self) -> web.Response:
        body = msgspec.json.encode({"error": {"reason": self.reason, "message": self.message}})
        headers = (
            {"www-authenticate": 'Bearer realm="sandman"'} if self.reason.endswith("_token") else {}
        )
        return web.Response(
            status=REASON_STATUS[self.reason],
            body=body,
            content_type="application/json",
            headers=headers,
        )


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.strip().encode()).digest()


@dataclass(slots=True)
class _Credentials:
    """What daemon/sandbox/claim.py's ``Credentials`` holds, as digests."""

    current: bytes | None
    pool: bytes | None
    claimed: tuple[str, bytes] | None = None

    def check(self, token: str, *, claim_route: bool) -> None:
        presented = _digest(token)
        unclaimed = self.pool is not None and self.claimed is None
        if claim_route:
            expected = self.pool if self.pool is not None else self.current
        elif unclaimed:
            if self.pool is not None and hmac.compare_digest(presented, self.pool):
                raise _Refused("sandbox_unclaimed", "a pool sandbox runs nothing before its claim")
            expected = None
        else:
            expected = self.current
        if expected is None or not hmac.compare_digest(presented, expected):
            raise _Refused("invalid_token", "invalid bearer token")

    def take(self, claim: _Claim) -> None:
        new = _digest(claim.token)
        if self.pool is None:
            raise _Refused("already_claimed", "not a pool sandbox")
        if self.claimed is not None:
            name, held = self.claimed
            if name == claim.claim and hmac.compare_digest(new, held):
                return
            raise _Refused("already_claimed", "claimed by another claim")
        for key, value in claim.env.items():
            if not key or "=" in key or "\0" in key or "\0" in value:
                raise _Refused("invalid_env", f"environment variable {key!r} is not valid")
        self.claimed, self.current = (claim.claim, new), new


def _credentials(env: Mapping[str, str]) -> _Credentials | None:
    """The pod's credentials from its daemon env; None when the pod carries no daemon."""
    if ENV_VERIFIER in env:
        try:
            verifier = bytes.fromhex(env[ENV_VERIFIER].strip())
        except ValueError:
            return None  # the real daemon would refuse to start; the stand-in answers nothing
    elif ENV_TOKEN in env:
        verifier = _digest(env[ENV_TOKEN])
    else:
        return None
    pooled = env.get(ENV_POOLED, "").strip().lower() in _TRUE
    return _Credentials(None if pooled else verifier, verifier if pooled else None)


class StandInDaemon:
    """One pod's stand-in: its credentials and the requests it answers."""

    def __init__(self, credentials: _Credentials) -> None:
        self.credentials = credentials

    async def handle(self, request: web.BaseRequest) -> web.StreamResponse:
        try:
            response = await self._answer(request)
        except _Refused as refused:
            response = refused.response()
        # Every answer closes its connection (the real daemon keeps it alive): a pod takes
        # one claim, and 11,858 listeners plus as many kept-alive connections would pass
        # this kind of machine's 20,000 open files (RLIMIT_NOFILE's hard limit).
        response.force_close()
        return response

    async def _answer(self, request: web.BaseRequest) -> web.StreamResponse:
        if request.path == "/healthz":
            return web.Response(body=b'{"status":"ok"}', content_type="application/json")
        scheme, _, token = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not token:
            raise _Refused("missing_token", "missing bearer token")
        claim_route = (request.method, request.path) == CLAIM
        self.credentials.check(token, claim_route=claim_route)
        _resolve(request.method, request.path)
        if not claim_route:
            raise _Refused("not_simulated", "tool calls are not simulated on the virtual runtime")
        self.credentials.take(await _claim_body(request))
        return web.Response(status=204)


def _resolve(method: str, path: str) -> None:
    if path.startswith(PORTS_PREFIX):
        return  # any method: the daemon forwards it to a port inside the sandbox
    allowed = False
    for route_method, pattern in _PATTERNS:
        if pattern.match(path):
            if route_method == method:
                return
            allowed = True
    if allowed:
        raise _Refused("method_not_allowed", f"{method} is not allowed on {path}")
    raise _Refused("no_such_endpoint", f"no such endpoint: {path}")


async def _claim_body(request: web.BaseRequest) -> _Claim:
    if (request.content_length or 0) > _MAX_BODY:
        raise _Refused("body_too_large", f"a JSON body is at most {_MAX_BODY} bytes")
    raw = await request.read()
    try:
        return msgspec.json.decode(raw or b"{}", type=_Claim)
    except msgspec.ValidationError as exc:
        raise _Refused("invalid_request", str(exc)) from exc
    except msgspec.DecodeError as exc:
        raise _Refused("invalid_json", f"body is not valid JSON: {exc}") from exc


def _daemon_port(sandbox: Sandbox) -> tuple[Mapping[str, str], int] | None:
    """The env and port of the container that carries the daemon, if any."""
    for container in sandbox.containers:
        probe = container.readiness
        http = probe is not None and probe.http_path is not None and probe.port > 0
        if http and (ENV_VERIFIER in container.env or ENV_TOKEN in container.env):
            assert probe is not None
            return container.env, probe.port
    return None


@dataclass(slots=True)
class _Listener:
    server: web.Server
    listener: asyncio.Server


class StandInRuntime(VirtualRuntime):
    """The ``virtual`` runtime with a stand-in daemon behind every pod that carries one.

    Its name stays ``virtual``: nothing runs, probes pass, nothing exits."""

    def __init__(self) -> None:
        self._listeners: dict[str, _Listener] = {}

    @property
    def listening(self) -> int:
        return len(self._listeners)

    async def start(self, sandbox: Sandbox) -> None:
        if sandbox.virtual or sandbox.uid in self._listeners:
            return
        found = _daemon_port(sandbox)
        credentials = _credentials(found[0]) if found is not None else None
        if found is None or credentials is None:
            return
        server = web.Server(StandInDaemon(credentials).handle, access_log=None)
        loop = asyncio.get_running_loop()
        try:
            listener = await loop.create_server(server, sandbox.ip, found[1], backlog=64)
        except OSError as e:
            await server.shutdown(_SHUTDOWN_S)
            raise RuntimeStartError(
                "CreateContainerError", f"stand-in daemon on {sandbox.ip}:{found[1]}: {e}"
            ) from e
        self._listeners[sandbox.uid] = _Listener(server, listener)

    async def stop(self, sandbox: Sandbox, grace_s: float) -> None:
        held = self._listeners.pop(sandbox.uid, None)
        if held is not None:
            held.listener.close()
            # Connections end as a dead daemon's do. Bounded: aiohttp reads a timeout <= 0 as
            # none, and would wait for a request in flight to finish.
            await held.server.shutdown(_SHUTDOWN_S)

    async def close(self) -> None:
        held, self._listeners = list(self._listeners.values()), {}
        for one in held:
            one.listener.close()
        await asyncio.gather(*(one.server.shutdown(_SHUTDOWN_S) for one in held))


def raise_open_file_limit(wanted: int) -> int:
    """Raise the soft ``RLIMIT_NOFILE`` towards the hard limit so that ``wanted`` listeners
    (and their connections) fit; returns the soft limit now in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard if hard != resource.RLIM_INFINITY else max(soft, wanted)
    if soft < target:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        soft = target
    if soft < wanted:
        log.warning("RLIMIT_NOFILE %d < %d: some stand-in daemons will not start", soft, wanted)
    return soft
