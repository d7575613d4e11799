"""Generated tool-call paths: daemon operations, their disguises, and plain hostile ones.

Shared by the facade's path tests (the pure check, facade/paths.py) and the end-to-end ones
(the same paths sent to a real facade and daemon), so both draw from one alphabet of
disguises: dot-segments and their percent-encodings, encoded and doubled slashes,
backslashes, double encodings, parameters' odd characters.
"""

from __future__ import annotations

from hypothesis import strategies as st

from daemon.sandbox.api import ROUTES as DAEMON_ROUTES
from facade.routes import PROXIED

__all__ = ["METHODS", "PIECES", "PORT_PIECES", "daemon_call", "hostile_call", "port_request"]

# Only what a request-target may hold: a raw space is the HTTP parser's own 400.
PIECES = [
    *PROXIED, "stream", "stat", "list", "run", "signal", "output", "healthz", "v1", "s-1",
    "a.b", "~x", "", ".", "..", "%2e", "%2E", ".%2e", "%2e%2E", "%2f", "%2F", "%5c", "\\",
    "%252e%252e", "%25", "a;b", "%00", "%41", "%e9", "%ff", "a?b", "%23", "%20", "%3F",
]  # fmt: skip
METHODS = ["GET", "POST", "PUT", "DELETE", "PATCH"]
NAMES = st.from_regex(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,8}", fullmatch=True)


def _sids(sid: str) -> st.SearchStrategy[str]:
    return st.sampled_from([sid, sid, sid, "..", "%2e%2e", f"{sid}%2F1", "", f"{sid}%2e"])


@st.composite
def daemon_call(draw: st.DrawFn, sid: str = "sb-1") -> tuple[str, str]:
    """(method, raw path): a daemon operation under ``/v1/sandboxes/<sid>/`` (mostly with
    its own method), parameters filled, maybe one disguise inserted somewhere."""
    route = draw(st.sampled_from(DAEMON_ROUTES))
    pieces = [draw(NAMES) if p.startswith("{") else p for p in route.path.split("/")[2:]]
    if draw(st.booleans()):
        pieces.insert(draw(st.integers(0, len(pieces))), draw(st.sampled_from(PIECES)))
    method = draw(st.sampled_from([route.method] * 3 + METHODS))
    return method, f"/v1/sandboxes/{draw(_sids(sid))}/" + "/".join(pieces)


@st.composite
def hostile_call(draw: st.DrawFn, sid: str = "sb-1") -> tuple[str, str]:
    """(method, raw path): up to six pieces of the alphabet, in any order."""
    pieces = draw(st.lists(st.sampled_from(PIECES), min_size=1, max_size=6))
    return draw(st.sampled_from(METHODS)), f"/v1/sandboxes/{draw(_sids(sid))}/" + "/".join(pieces)


#: What stands where a forwarded port's number goes: ``{port}`` and ``{daemon}`` are filled in
#: by the test (a port it chose, the daemon's own), the rest is refused or out of range.
PORT_PIECES = ["{port}", "{port}", "{port}", "{daemon}", "0", "65536", "080", "-1", "%38", "a", ""]
QUERIES = ["", "", "?a=1", "?x=%2F&y=..", "?", "?%00=%ff"]


@st.composite
def port_request(draw: st.DrawFn, sid: str = "sb-1") -> tuple[str, str]:
    """(method, raw path) of a forwarded port: ``/v1/sandboxes/<sid>/ports/<port>/`` and up
    to five pieces of the alphabet, maybe a query (the pieces may hold one too)."""
    port = draw(st.sampled_from(PORT_PIECES))
    pieces = draw(st.lists(st.sampled_from(PIECES), max_size=5))
    query = draw(st.sampled_from(QUERIES))
    path = f"/v1/sandboxes/{sid}/ports/{port}/" + "/".join(pieces)
    return draw(st.sampled_from(METHODS)), path + query
