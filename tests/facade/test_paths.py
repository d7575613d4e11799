"""A proxied tool call reaches exactly one allow-listed daemon operation, or nothing.

The facade decides on the canonical path (facade/paths.py); these tests hold every reader
on the way to that decision: the client's URL parser (yarl, which resolves dot-segments)
and the daemon's own router (which decodes the path once and its parameters again) must
see the same path the facade checked.
"""

from __future__ import annotations

from urllib.parse import unquote

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from yarl import URL

from daemon.sandbox.api import ROUTES as DAEMON_ROUTES
from daemon.sandbox.api import Route, bind
from daemon.sandbox.routing import Router
from facade.errors import FacadeError
from facade.paths import proxied_call
from facade.routes import PROXIED
from tests.support.paths import daemon_call, hostile_call

#: The daemon's router over its own table, each route standing for its handler.
ROUTER: Router[Route] = Router(bind(DAEMON_ROUTES, {route: route for route in DAEMON_ROUTES}))


@pytest.mark.parametrize(
    "tail",
    [
        "files/../../../healthz",
        "files/%2e%2e/%2e%2e/healthz",
        "files/.%2E/.%2e/healthz",
        "files/%252e%252e/healthz",
        "files//list",
        "files%2F..%2F..%2Fhealthz",
        "files\\..\\..\\healthz",
        "files/./list",
        "files/",
    ],
)
def test_dot_segments_and_their_disguises_are_refused(tail: str) -> None:
    with pytest.raises(FacadeError) as caught:
        proxied_call("GET", f"/v1/sandboxes/sb-1/{tail}")
    assert (caught.value.status, caught.value.reason) == (400, "invalid_path")


def test_only_daemon_operations_are_forwarded() -> None:
    assert proxied_call("GET", "/v1/sandboxes/sb-1/files/stat?path=/etc").path == "/v1/files/stat"
    with pytest.raises(FacadeError) as caught:
        proxied_call("GET", "/v1/sandboxes/sb-1/files/nothing")
    assert caught.value.status == 404
    with pytest.raises(FacadeError) as caught:
        proxied_call("GET", "/v1/sandboxes/sb-1/exec")
    assert (caught.value.status, caught.value.allow) == (405, ("POST",))


@settings(max_examples=400)
@given(request=st.one_of(daemon_call(), hostile_call()))
def test_what_is_forwarded_is_what_every_reader_sees(request: tuple[str, str]) -> None:
    method, raw = request
    sid = raw.split("/")[3]
    try:
        call = proxied_call(method, raw)
    except FacadeError as e:
        refused: FacadeError | None = e
    else:
        refused = None
    if refused is not None:
        assert refused.status in (400, 404, 405), refused
        return
    segments = call.path.split("/")[1:]
    assert segments[0] == "v1" and segments[1] in PROXIED
    assert all(s not in ("", ".", "..") for s in segments), call
    assert URL(f"http://127.0.0.1:1{call.path}").raw_path == call.path  # yarl leaves it
    assert unquote(call.path) == call.path  # the daemon's decoding leaves it
    route, params = ROUTER.resolve(method, unquote(call.path))  # the daemon has it
    assert route.method == method
    assert all(unquote(v) == v for v in params.values())  # and its second decoding too
    assert call.sandbox_id == unquote(sid) and "/" not in call.sandbox_id
