"""The client layer's one retry rule (kube/retry.py), held against both clients.

Each client is driven against a scripted aiohttp server on 127.0.0.1 that answers each
request's first attempt with a failure and the next with success; whether the client tried
again must be exactly what :class:`kube.retry.RetryRule` says for that method, ``idempotent=``
and status. A client that went back to a rule of its own (``HEAD`` left out of the safe
methods, a 504 treated as final, POST repeated after a 500) disagrees with the rule on some
cell of the matrix and fails here; a structural check makes sure every request and watch of
both clients goes through the one loop.
"""

from __future__ import annotations

import ast
import contextlib
import itertools
import json
import random
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer
from hypothesis import given
from hypothesis import strategies as st

from kube import ClientSettings, KubeClient, Timeouts
from kube.credentials import Credentials
from kube.errors import (
    Conflict,
    KubeError,
    NotFound,
    SendDeadlinePassed,
    ServerError,
    TooManyRequests,
    TransportError,
    error_from_status,
)
from kube.light import LightClient
from kube.retry import SAFE_METHODS, RetryRule
from sandman.base.backoff import Backoff

pytestmark = pytest.mark.timeout(60)
ROOT = Path(__file__).resolve().parents[2]
SETTINGS = ClientSettings(
    qps=0,
    max_attempts=2,
    backoff_base_s=0.001,
    backoff_cap_s=0.002,
    timeouts=Timeouts(connect_s=2, request_s=5, watch_idle_s=5),
)
RULE = RetryRule.for_client(SETTINGS)
PREFIX = "/behind/a/proxy"  # the server URL's own path: both transports must keep it
METHODS = ("GET", "PUT", "DELETE", "PATCH", "POST")
STATUSES = (400, 404, 409, 422, 429, 500, 503, 504)
IDEMPOTENT = (None, True, False)
Client = KubeClient | LightClient


# --- the rule itself ------------------------------------------------------------------------
def test_the_rule_says_which_methods_are_safe_and_the_caller_may_overrule_it() -> None:
    assert {m for m in ("GET", "HEAD", "PUT", "DELETE", "PATCH", "POST") if RULE.is_safe(m)} == {
        "GET", "HEAD", "PUT", "DELETE", "PATCH"
    }  # fmt: skip
    assert RULE.safe_methods is SAFE_METHODS
    assert RULE.is_safe("POST", idempotent=True) and not RULE.is_safe("GET", idempotent=False)


def test_the_rule_retries_throttling_and_unsent_requests_always_the_rest_only_when_safe() -> None:
    throttled, refused = TooManyRequests("slow"), TransportError("refused", sent=False)
    broken, failed, missing = TransportError("reset"), ServerError("boom"), NotFound("no")
    for safe in (True, False):
        assert RULE.worth_retry(throttled, safe) and RULE.worth_retry(refused, safe)
        assert RULE.worth_retry(broken, safe) is safe and RULE.worth_retry(failed, safe) is safe
        assert not RULE.worth_retry(missing, safe) and not RULE.worth_retry(Conflict("c"), safe)
    assert not RULE.worth_retry(SendDeadlinePassed("late"), True)


@given(
    attempts=st.integers(1, 8),
    attempt=st.integers(1, 10),
    retry_after=st.none() | st.floats(0, 100, allow_nan=False),
    seed=st.integers(0, 2**32),
)
def test_the_delay_honours_retry_after_as_a_floor_within_the_budget(
    attempts: int, attempt: int, retry_after: float | None, seed: int
) -> None:
    rule = RetryRule(max_attempts=attempts, backoff=Backoff(0.1, cap_s=5, max_retry_after_s=30))
    error = TooManyRequests("slow", retry_after_s=retry_after)
    delay = rule.delay(error, attempt, False, random.Random(seed))
    if attempt >= attempts:
        assert delay is None  # the budget counts attempts in all, the first included
        return
    assert delay is not None and delay <= max(5, 30 * 1.2)
    assert delay >= min(retry_after or 0, 30)


# --- both clients against it ----------------------------------------------------------------
@contextlib.asynccontextmanager
async def scripted() -> AsyncIterator[tuple[str, Counter[str]]]:
    """A server whose every path fails once (with the status the path names) and then
    answers 200; the Counter holds each ``METHOD path?query``'s arrivals, and each
    ``lean METHOD path?query``'s that came over the lean pool (aiohttp always sends an
    Accept-Encoding; the lean pool never does)."""
    arrivals: Counter[str] = Counter()

    async def handler(request: web.Request) -> web.StreamResponse:
        if request.path.rstrip("/").endswith("/version"):  # kr8s asks once, when connecting
            return web.json_response({"major": "1", "minor": "31", "gitVersion": "v1.31.0"})
        key = f"{request.method} {request.path_qs}"
        arrivals[key] += 1
        if "Accept-Encoding" not in request.headers:
            arrivals[f"lean {key}"] += 1
        status = int(request.path.rsplit("-", 1)[-1])
        if arrivals[key] == 1 and status != 200:
            body = {"kind": "Status", "code": status, "reason": "", "message": "scripted"}
            headers = {"Retry-After": "0"} if status == 429 else {}
            return web.json_response(body, status=status, headers=headers)
        return web.json_response({"kind": "ConfigMap", "metadata": {"name": "x"}})

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handler)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    try:
        yield str(server.make_url(PREFIX)), arrivals
    finally:
        await server.close()


def kubeconfig(url: str, directory: Path) -> Path:
    path = directory / "kubeconfig"
    cluster = {"name": "c", "cluster": {"server": url}}
    user = {"name": "u", "user": {"token": "t0ken"}}
    context = {"name": "x", "context": {"cluster": "c", "user": "u"}}
    config = {"apiVersion": "v1", "kind": "Config", "clusters": [cluster], "users": [user],
              "contexts": [context], "current-context": "x"}  # fmt: skip
    path.write_text(json.dumps(config))
    return path


Opener = Callable[[str, Path], Awaitable[Client]]


async def open_kube(url: str, directory: Path) -> Client:
    return await KubeClient.connect(SETTINGS, kubeconfig=str(kubeconfig(url, directory)))


async def open_light(url: str, _directory: Path) -> Client:
    return LightClient(Credentials(server=url, ssl=None), SETTINGS)


def expected_attempts(method: str, idempotent: bool | None, status: int) -> int:
    error = error_from_status(status, {"code": status, "message": "scripted"}, "0")
    return 2 if RULE.worth_retry(error, RULE.is_safe(method, idempotent)) else 1


@pytest.mark.anyio
@pytest.mark.parametrize("opener", [open_kube, open_light], ids=["KubeClient", "LightClient"])
async def test_every_client_repeats_exactly_what_the_rule_says(
    opener: Opener, tmp_path: Path
) -> None:
    cases = list(itertools.product(METHODS, IDEMPOTENT, STATUSES))
    async with scripted() as (url, arrivals):
        client = await opener(url, tmp_path)
        try:
            for i, (method, idempotent, status) in enumerate(cases):
                path = f"/api/v1/namespaces/default/configmaps/case{i}-{status}"
                with contextlib.suppress(KubeError):
                    await client.request(method, path, body={}, idempotent=idempotent)
        finally:
            await client.close()
    seen = {key.split(" ", 1)[1]: n for key, n in arrivals.items() if not key.startswith("lean")}
    for i, (method, idempotent, status) in enumerate(cases):
        path = f"{PREFIX}/api/v1/namespaces/default/configmaps/case{i}-{status}"
        assert seen[path] == expected_attempts(method, idempotent, status), (
            f"{type(client).__name__} {method} idempotent={idempotent} after {status}"
        )


@pytest.mark.anyio
async def test_the_lean_transport_takes_queries_and_head_is_safe(tmp_path: Path) -> None:
    """``lean=True`` is never silently ignored: a query goes with it (and the server URL's
    path too); HEAD, which only the aiohttp transport can frame, is repeated after a 503."""
    async with scripted() as (url, arrivals):
        client = await KubeClient.connect(SETTINGS, kubeconfig=str(kubeconfig(url, tmp_path)))
        try:
            path = "/api/v1/namespaces/default/configmaps/lean-503"
            await client.request("PUT", path, query={"dryRun": "All"}, body={}, lean=True)
            await client.request("GET", path.replace("lean", "get"), lean=True)
            await client.request("HEAD", path.replace("lean", "head"))
        finally:
            await client.close()
    base = f"{PREFIX}/api/v1/namespaces/default/configmaps"
    assert arrivals[f"lean PUT {base}/lean-503?dryRun=All"] == 2
    assert arrivals[f"lean GET {base}/get-503"] == 2
    assert arrivals[f"HEAD {base}/head-503"] == 2 and not arrivals[f"lean HEAD {base}/head-503"]


# --- and nothing beside it ------------------------------------------------------------------
LOOPS = {
    "kube/client.py": ("KubeClient.request", "KubeClient._open_stream"),
    "kube/light.py": ("LightClient.request", "LightClient.watch"),
}


def _functions(tree: ast.Module) -> dict[str, ast.AsyncFunctionDef | ast.FunctionDef]:
    found = {}
    for cls in (n for n in tree.body if isinstance(n, ast.ClassDef)):
        for fn in cls.body:
            if isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
                found[f"{cls.name}.{fn.name}"] = fn
    return found


#: The clients and what they stand on (the informer's relist backoff is a loop above them).
CLIENT_MODULES = ("client.py", "light.py", "verbs.py", "lean.py", "watch.py", "errors.py")


def test_no_client_keeps_a_retry_rule_or_loop_of_its_own() -> None:
    for name in CLIENT_MODULES:
        module = ROOT / "kube" / name
        tree = ast.parse(module.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute):  # the rule's inputs, read only by the rule
                assert node.attr not in ("max_attempts", "backoff"), (
                    f"{module.name}:{node.lineno} reads .{node.attr}: use kube.retry.RetryRule"
                )
            if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "frozenset":
                names = {getattr(a, "value", None) for a in ast.walk(node)}
                assert not names & {"GET", "PUT", "POST"}, f"{module.name}: methods of its own"
        functions = _functions(tree)
        for name in LOOPS.get(f"kube/{module.name}", ()):
            calls = {getattr(c.func, "id", "") for c in ast.walk(functions[name])
                     if isinstance(c, ast.Call)}  # fmt: skip
            assert "send_with_retries" in calls, f"{name} does not use kube.retry's loop"
