"""The one table of error reasons (sandman/wire/errors.py), held against everyone who uses it.

- the table itself: one spelling per reason, statuses and kinds that fit together;
- the servers raise from it: no facade or daemon raise site spells a reason as a string, every
  reason they name is a row of their side, every row of a side is raised by that side, and
  every parameter of the facade's route table has its ``invalid_x`` (``x_required``) row;
- the status on the wire is the row's (FacadeError, DaemonError and their headers);
- the SDK decodes from it: every row becomes the class its kind names, retriable as the row
  says, and a reason the table lacks falls back to its status;
- docs/facade.md and docs/daemon-api.md list the rows (generated sections;
  ``SANDMAN_UPDATE_GOLDEN=1`` rewrites them, then review the diff).
"""

from __future__ import annotations

import ast
import os
import re
from pathlib import Path

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from daemon.sandbox.errors import DaemonError
from facade.errors import FacadeError, error_response
from facade.params import invalid, required
from facade.routes import ROUTES
from sandman.base.errors import Failure
from sandman.sdk.daemon_client import DaemonAPIError
from sandman.sdk.errors import (
    CLASS_OF,
    ClientReason,
    RetriableError,
    SandmanError,
    TerminalError,
    error_for,
)
from sandman.wire.errors import (
    ErrorBody,
    Kind,
    Reason,
    Side,
    decode_error,
    encode_error,
    kind_of,
)

ROOT = Path(__file__).resolve().parents[1]
SOURCES = {Side.FACADE: ROOT / "facade", Side.DAEMON: ROOT / "daemon" / "sandbox"}
RAISERS = {"FacadeError", "DaemonError"}


# --- the table ------------------------------------------------------------------------------
def test_each_reason_is_spelled_once_and_its_row_fits_together() -> None:
    for reason in Reason:
        assert reason.value == reason.name.lower(), f"{reason.name} is spelled {reason.value!r}"
        assert 400 <= reason.status < 600 and reason.side and reason.meaning.strip()
        assert "\n" not in reason.meaning and "|" not in reason.meaning
        if reason.retriable:  # only "slow down" and "not now" are worth the same call again
            assert reason.status == 429 or reason.status >= 500, reason
        if reason.status == 429:
            assert reason.retriable, reason
    assert not {r.value for r in ClientReason} & {r.value for r in Reason}


def test_every_kind_has_its_sdk_class_and_the_class_says_the_same_about_retrying() -> None:
    assert set(CLASS_OF) == set(Kind)
    for kind, cls in CLASS_OF.items():
        assert cls.retriable is kind.retriable
        assert issubclass(cls, RetriableError if kind.retriable else TerminalError)


# --- the servers raise from it --------------------------------------------------------------
def _modules(side: Side) -> list[Path]:
    return sorted(SOURCES[side].glob("*.py"))


def _raise_sites(path: Path) -> list[ast.Call]:
    tree = ast.parse(path.read_text())
    return [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) in RAISERS
    ]


def _spelled(node: ast.expr) -> bool:
    """A reason written as text: a literal, an f-string, text added up, ``Reason("x")``."""
    if isinstance(node, ast.Constant | ast.JoinedStr):
        return True
    if isinstance(node, ast.BinOp):
        return _spelled(node.left) or _spelled(node.right)
    return isinstance(node, ast.Call) and any(isinstance(a, ast.Constant) for a in node.args)


@pytest.mark.parametrize("side", [Side.FACADE, Side.DAEMON], ids=["facade", "daemon"])
def test_no_raise_site_spells_a_reason(side: Side) -> None:
    sites = 0
    for module in _modules(side):
        for call in _raise_sites(module):
            sites += 1
            where = f"{module.relative_to(ROOT)}:{call.lineno}"
            assert len(call.args) == 1, f"{where}: the message is the only positional argument"
            reason = next((k.value for k in call.keywords if k.arg == "reason"), None)
            assert reason is not None, f"{where}: no reason="
            assert not _spelled(reason), f"{where}: a reason spelled as text, not a Reason"
    assert sites > 20  # the scan found the raise sites


def _named(side: Side) -> dict[str, Path]:
    """Every table reason a side's code names as ``Reason.X``."""
    found: dict[str, Path] = {}
    for module in _modules(side):
        for name in re.findall(r"\bReason\.([A-Z][A-Z0-9_]*)\b", module.read_text()):
            found[getattr(Reason, name).value] = module
    return found


def _quoted(side: Side) -> set[str]:
    """Every table reason a side's code quotes as text (facade/podspec.py's PodSpecError,
    converted by the facade with ``Reason.named``)."""
    texts = [module.read_text() for module in _modules(side)]
    return {r.value for r in Reason if any(f'"{r.value}"' in text for text in texts)}


def _parameter_reasons() -> set[Reason]:
    """``invalid_x`` for every query, path and header parameter of the route table, and
    ``x_required`` for every required query parameter (facade/params.py derives them)."""
    found: set[Reason] = set()
    for route in ROUTES:
        if route.query_model is not None:
            for field in msgspec.structs.fields(route.query_model):
                found.add(invalid(field.encode_name))
                if field.required:
                    found.add(required(field.encode_name))
        found |= {invalid(name) for name, _ in (*route.path_types, *route.header_types)}
    return found


def test_every_parameter_of_the_route_table_has_its_reason() -> None:
    """``invalid``/``required`` raise LookupError for a parameter without its row."""
    reasons = _parameter_reasons()
    assert {Reason.INVALID_LIMIT, Reason.OWNER_REQUIRED, Reason.INVALID_IDEMPOTENCY_KEY} <= reasons
    assert all(Side.FACADE in r.side for r in reasons)


@pytest.mark.parametrize("side", [Side.FACADE, Side.DAEMON], ids=["facade", "daemon"])
def test_a_side_raises_exactly_its_rows(side: Side) -> None:
    named = _named(side)
    if side is Side.FACADE:
        named |= {r.value: ROOT / "facade" / "params.py" for r in _parameter_reasons()}
    for wire, module in named.items():
        assert side in Reason(wire).side, f"{module.name} raises {wire}, a row of another side"
    rows = {r.value for r in Reason if side in r.side}
    unraised = rows - set(named) - _quoted(side)
    assert not unraised, f"rows nobody on this side raises: {sorted(unraised)}"


# --- the status on the wire is the row's ----------------------------------------------------
@pytest.mark.parametrize("reason", list(Reason), ids=str)
def test_servers_answer_a_reason_with_its_rows_status(reason: Reason) -> None:
    error: Failure
    if Side.FACADE in reason.side:
        error = FacadeError("m", reason=reason, retry_after_s=2.4)
        response = error_response(error)
        assert response.status == reason.status and response.headers["Retry-After"] == "2"
        assert response.body == encode_error(reason, "m")
    if Side.DAEMON in reason.side:
        error = DaemonError("m", reason=reason)
        assert error.status == reason.status and error.retriable is reason.retriable
        headers = dict(error.headers())
        assert ("retry-after" in headers) is (reason.status == 429)
        assert ("www-authenticate" in headers) is (reason.status == 401)
    assert str(error) == f"{reason}: m" and error.message == "m"


@given(st.text())
def test_the_error_body_round_trips_whatever_the_message(message: str) -> None:
    decoded = decode_error(encode_error(Reason.INVALID_PATH, message))
    assert decoded is not None and decoded.reason == "invalid_path"
    assert decoded.message == message.encode("utf-8", "backslashreplace").decode("utf-8")


# --- the SDK decodes from it ----------------------------------------------------------------
@pytest.mark.parametrize("reason", list(Reason), ids=str)
def test_the_sdk_decodes_every_row_to_its_kinds_class(reason: Reason) -> None:
    error = error_for(reason.status, reason.value, "m", {"Retry-After": "3"})
    assert type(error) is CLASS_OF[reason.kind]
    assert error.retriable is reason.retriable is isinstance(error, RetriableError)
    assert (error.status, error.reason, error.retry_after_s) == (reason.status, reason, 3.0)
    direct = DaemonAPIError("m", reason=reason.value, status=reason.status)
    assert isinstance(direct, SandmanError) and direct.retriable is reason.retriable


@given(status=st.integers(100, 599), reason=st.text(max_size=30))
def test_an_unknown_reason_falls_back_to_its_status(status: int, reason: str) -> None:
    error = error_for(status, reason, "m")
    known = next((r for r in Reason if r.value == reason), None)
    expected = known.kind if known is not None else kind_of(status, "")
    assert type(error) is CLASS_OF[expected] and error.retriable is expected.retriable
    assert kind_of(status, reason) is expected
    if known is None and status >= 500 and status not in (502, 503, 504):
        assert expected is Kind.SERVER_ERROR


# --- the docs list the table ----------------------------------------------------------------
DOCS = {
    "docs/facade.md": Side.FACADE,
    "docs/daemon-api.md": Side.DAEMON,
}
BEGIN = (
    "<!-- error reasons: generated from sandman/wire/errors.py by tests/test_error_reasons.py;"
    " SANDMAN_UPDATE_GOLDEN=1 rewrites it -->"
)
END = "<!-- /error reasons -->"


def reasons_table(side: Side) -> str:
    rows = sorted((r for r in Reason if side in r.side), key=lambda r: (r.status, r.value))
    lines = [
        "| status | reason | retriable | SDK class | meaning |",
        "|---|---|---|---|---|",
        *(
            f"| {r.status} | `{r}` | {'yes' if r.retriable else 'no'} "
            f"| `{CLASS_OF[r.kind].__name__}` | {r.meaning} |"
            for r in rows
        ),
    ]
    return "\n".join([BEGIN, *lines, END])


@pytest.mark.parametrize("doc", sorted(DOCS))
def test_the_docs_list_the_table(doc: str) -> None:
    path = ROOT / doc
    text = path.read_text()
    pattern = re.compile(re.escape(BEGIN) + r".*?" + re.escape(END), re.S)
    assert pattern.search(text), f"{doc} has no generated section of error reasons"
    current = pattern.sub(lambda _: reasons_table(DOCS[doc]), text)
    if os.environ.get("SANDMAN_UPDATE_GOLDEN"):
        path.write_text(current)
        text = path.read_text()
    assert text == current, f"{doc} is out of date: SANDMAN_UPDATE_GOLDEN=1 pytest {__file__}"


def test_the_body_is_the_one_wire_model() -> None:
    body = msgspec.json.decode(encode_error(Reason.BUSY, "x"), type=ErrorBody)
    assert (body.error.reason, body.error.message) == ("busy", "x")
