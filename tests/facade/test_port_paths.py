"""A forwarded port's path is read alike by every hop, or refused (daemon/sandbox/port_paths.py).

Generated paths (tests/support/paths.py: the tool calls' alphabet of disguises after a port)
go through the facade's decision (``port_call``), the URL the facade sends the daemon (yarl
told not to normalise), and the daemon's own reading of that target (``port_target``): each
must come to the same port and target, and no target may hold what a later reader could turn
into another path (a dot-segment, an encoded slash or backslash).
"""

from __future__ import annotations

from urllib.parse import unquote

import pytest
from hypothesis import given, settings
from yarl import URL

from daemon.sandbox.layout import DAEMON_PORT
from daemon.sandbox.port_paths import PORTS_PREFIX, PortPathError, port_target
from facade.errors import FacadeError
from facade.paths import PORT_REASONS, port_call
from facade.port_proxy import PortProxy
from facade.proxy import ProxyLimits
from sandman.wire.errors import Reason
from tests.support.paths import port_request

PROXY = PortProxy(ProxyLimits(), DAEMON_PORT)  # its URLs only: never started


def _decide(raw: str) -> object:
    try:
        return port_call(URL(raw, encoded=True), reserved=DAEMON_PORT)
    except FacadeError as e:
        return e.reason


@pytest.mark.parametrize(
    ("tail", "reason"),
    [
        ("0/", Reason.INVALID_PORT),
        ("65536/", Reason.INVALID_PORT),
        ("080/", Reason.INVALID_PORT),
        ("", Reason.INVALID_PORT),
        (f"{DAEMON_PORT}/v1/exec", Reason.PORT_RESERVED),
        ("8080/a/../../exec", Reason.INVALID_PATH),
        ("8080/%2e%2E/exec", Reason.INVALID_PATH),
        ("8080/a%2Fb", Reason.INVALID_PATH),
        ("8080/a%5Cb", Reason.INVALID_PATH),
        ("8080//b", Reason.INVALID_PATH),
    ],
)
def test_refused(tail: str, reason: Reason) -> None:
    assert _decide(f"/v1/sandboxes/sb-1/ports/{tail}") is reason


def test_kept_as_encoded() -> None:
    call = port_call(URL("/v1/sandboxes/sb-1/ports/8080/a%20b/?q=%2F&r", encoded=True), reserved=1)
    assert (call.sandbox_id, call.target.port, call.target.target) == (
        "sb-1",
        8080,
        "/a%20b/?q=%2F&r",
    )
    bare = port_call(URL("/v1/sandboxes/sb-1/ports/8080", encoded=True), reserved=1)
    assert bare.target.target == "/"


@settings(max_examples=400)
@given(request=port_request())
def test_every_hop_reads_the_same_target(request: tuple[str, str]) -> None:
    _, raw = request
    decided = _decide(raw.format(port=8080, daemon=DAEMON_PORT))
    if isinstance(decided, Reason):
        assert decided in (*PORT_REASONS, Reason.NOT_FOUND), decided
        return
    target = decided.target  # type: ignore[attr-defined]
    sent = PROXY.url("10.0.0.1", target)
    assert sent.raw_path_qs == f"{PORTS_PREFIX}{target.port}{target.target}"  # yarl leaves it
    try:
        again = port_target(sent.raw_path_qs, reserved=DAEMON_PORT)
    except PortPathError as e:  # pragma: no cover - the failure this test is for
        raise AssertionError(f"the daemon refuses what the facade sent: {e}") from e
    assert again == target
    for segment in target.target.split("?", 1)[0].split("/")[1:]:
        decoded = unquote(segment)
        assert decoded not in (".", "..") and not {"/", "\\", "\x00"} & set(decoded), target
