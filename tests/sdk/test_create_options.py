"""The create request reaches the wire as the trainer gave it, by every way of giving it.

The request is defined once, ``sandman.wire.facade.CreateSandbox``; the SDK's keywords and
the ``sandman create`` flags are read from it (``sandman.wire.create_request``). So the
property that matters is end to end: for any valid request (drawn from the Struct's own
types and bounds), the SDK's keywords, the blocking twin's, and the CLI's flags each put
exactly that request on the wire, as a scripted facade decodes it with the same Struct; and
what a caller leaves out arrives as the Struct's default. Then the refusals: the CLI checks
a flag against the field's type before sending, the SDK refuses an unknown keyword.
"""

from __future__ import annotations

import contextlib
import io
import pydoc
from collections.abc import Iterator
from typing import Any, get_type_hints

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sandman import AsyncSandman, CreateOptions, Sandman
from sandman.cli import create_flag, main
from sandman.wire.create_request import NOT_OPTIONS, create_fields
from sandman.wire.facade import CreateBatch, CreateSandbox
from tests.support.scripted_facade import ScriptedFacade, scripted_facade

IMAGE, OWNER = "registry.example/tasks/demo:1", "run-create"
VIEW = {"id": "sb-1", "owner": OWNER, "class": "tiny", "image": IMAGE, "state": "ready"}
EXAMPLES = settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


def _batch(body: bytes) -> Any:
    """A batch's answer: as many sandboxes as it asked for."""
    count = msgspec.json.decode(body, type=CreateBatch).count
    return {"sandboxes": [{**VIEW, "id": f"sb-{i + 1}"} for i in range(count)]}


@pytest.fixture(scope="module")
def facade() -> Iterator[ScriptedFacade]:
    answers = {"POST /v1/sandboxes": VIEW, "POST /v1/batches": _batch}
    with scripted_facade(answers) as scripted:
        yield scripted


def _sent(facade: ScriptedFacade) -> CreateSandbox:
    """The create request the last call put on the wire, decoded as the facade does."""
    last = facade.seen[-1]
    if last.path == "/v1/batches":
        return msgspec.json.decode(last.body, type=CreateBatch).spec
    return msgspec.json.decode(last.body, type=CreateSandbox)


# --- valid requests, drawn from the Struct's own types -------------------------------------
def _values(t: Any) -> st.SearchStrategy[Any]:
    """Every valid value of a msgspec type, as its constraints say (new kinds: extend)."""
    if isinstance(t, msgspec.inspect.Metadata):
        return _values(t.type)
    if isinstance(t, msgspec.inspect.StrType):
        text = st.from_regex(t.pattern) if t.pattern else st.text()
        # Long strings add nothing a short one does not show (and hypothesis's reports of
        # them are unreadable): at most 40 characters, within the type's own bounds.
        low, high = t.min_length or 0, min(t.max_length or 40, 40)
        return text.filter(lambda s: low <= len(s) <= high)
    if isinstance(t, msgspec.inspect.IntType):
        return st.integers(min_value=t.ge, max_value=t.le)
    if isinstance(t, msgspec.inspect.NoneType):
        return st.none()
    if isinstance(t, msgspec.inspect.UnionType):
        return st.one_of(*(_values(u) for u in t.types))
    if isinstance(t, msgspec.inspect.DictType):
        return st.dictionaries(_values(t.key_type), _values(t.value_type), max_size=3)
    raise TypeError(f"no strategy for {t!r}: extend _values")


_FIELDS = {f.name: f.type for f in msgspec.inspect.type_info(CreateSandbox).fields}
OPTIONS = st.fixed_dictionaries(
    {}, optional={f.name: _values(_FIELDS[f.name]) for f in create_fields()}
)


def _expected(options: dict[str, Any]) -> CreateSandbox:
    given = {k: v for k, v in options.items() if v is not None}
    return CreateSandbox(image=IMAGE, owner=OWNER, **given)


def _argv(options: dict[str, Any]) -> list[str]:
    """``sandman create`` flags for ``options`` (``--flag=value``: values may start with -)."""
    fields = {f.name: f for f in create_fields()}
    argv: list[str] = []
    for name, value in options.items():
        flag, _ = create_flag(fields[name])
        if value is None:
            continue
        if fields[name].is_mapping:
            argv += [f"{flag}={k}={v}" for k, v in value.items()]
        else:
            argv.append(f"{flag}={value}")
    return argv


# --- the round trips -----------------------------------------------------------------------
@pytest.mark.anyio
@EXAMPLES
@given(options=OPTIONS)
async def test_any_request_reaches_the_wire_through_the_sdk_keywords(
    facade: ScriptedFacade, options: dict[str, Any]
) -> None:
    async with AsyncSandman(facade.url, "t", owner=OWNER, lease_s=None,
                            release_on_exit=False) as client:  # fmt: skip
        await client.create(IMAGE, wait=False, **options)
        assert _sent(facade) == _expected(options)
        await client.create_many(2, IMAGE, wait=False, **options)
        assert _sent(facade) == _expected(options)


@EXAMPLES
@given(options=OPTIONS)
def test_any_request_reaches_the_wire_through_the_blocking_twin(
    facade: ScriptedFacade, options: dict[str, Any]
) -> None:
    with Sandman(facade.url, "t", owner=OWNER, lease_s=None, release_on_exit=False) as client:
        client.create(IMAGE, wait=False, **options)
        assert _sent(facade) == _expected(options)


@EXAMPLES
@given(options=OPTIONS)
def test_any_request_reaches_the_wire_through_the_cli_flags(
    facade: ScriptedFacade, options: dict[str, Any]
) -> None:
    argv = ["create", IMAGE, "--url", facade.url, "--token", "t", "--owner", OWNER, "--no-wait"]
    with contextlib.redirect_stdout(io.StringIO()) as out:
        assert main([*argv, *_argv(options)]) == 0
    assert out.getvalue() == "sb-1\n"
    assert _sent(facade) == _expected(options)


def test_what_is_left_out_arrives_as_the_structs_default(facade: ScriptedFacade) -> None:
    defaults = {f.name: f.default for f in create_fields()}
    with Sandman(facade.url, "t", owner=OWNER, lease_s=None, release_on_exit=False) as client:
        client.create(IMAGE, wait=False, env=None, labels=None)
    sent = _sent(facade)
    assert {name: getattr(sent, name) for name in defaults} == defaults
    # ... and the defaults are the Struct's own, not a copy: what a bare body decodes to.
    bare = msgspec.json.decode(b'{"image": "i", "owner": "o"}', type=CreateSandbox)
    assert {name: getattr(bare, name) for name in defaults} == defaults


# --- the keywords as type checkers and help() see them -------------------------------------
def test_the_keywords_are_the_structs_fields_but_image_and_owner() -> None:
    struct = [f.name for f in msgspec.structs.fields(CreateSandbox)]
    assert [f.name for f in create_fields()] == [n for n in struct if n not in NOT_OPTIONS]
    assert list(get_type_hints(CreateOptions)) == [f.name for f in create_fields()]
    assert all(f.description for f in create_fields()), "a create field without a description"


@pytest.mark.parametrize(
    "method", [AsyncSandman.create, AsyncSandman.create_many, Sandman.create, Sandman.create_many]
)
def test_help_shows_every_field_with_its_default(method: Any) -> None:
    text = pydoc.render_doc(method, renderer=pydoc.plaintext)
    for field in create_fields():
        assert f"{field.name}: " in text and f"= {field.default!r}" in text
        assert field.description in text


def test_an_unknown_keyword_is_refused_before_anything_is_sent(facade: ScriptedFacade) -> None:
    sent = len(facade.seen)
    with (
        Sandman(facade.url, "t", owner=OWNER, lease_s=None, release_on_exit=False) as client,
        pytest.raises(TypeError, match="ttl"),
    ):
        client.create(IMAGE, wait=False, ttl=600)  # type: ignore[call-arg]
    assert len(facade.seen) == sent


# --- the CLI's flags -----------------------------------------------------------------------
def test_the_cli_help_names_each_field_by_its_flag(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        main(["create", "--help"])
    assert done.value.code == 0
    text = " ".join(capsys.readouterr().out.split())  # argparse wraps lines
    for field in create_fields():
        flag, metavar = create_flag(field)
        assert f"{flag} {metavar}" in text and field.description in text
    assert "--ttl-s TTL_S seconds after its creation the sandbox is deleted (default: 3600)" in text
    assert "--label K=V labels to find the sandbox by" in text


@pytest.mark.parametrize(
    ("flag", "complaint"),
    [
        ("--ttl-s=0", "Expected `int` >= 1"),
        ("--ttl-s=soon", "Expected `int`"),
        ("--idle-timeout-s=604801", "<= 604800"),
        ("--env=SANDMAN_TOKEN=x", "at `key`"),
        ("--env=novalue", "is not K=V"),
        ("--label=k=not a label", "matching regex"),
    ],
)
def test_the_cli_refuses_a_value_outside_the_fields_type(
    facade: ScriptedFacade, flag: str, complaint: str, capsys: pytest.CaptureFixture[str]
) -> None:
    sent = len(facade.seen)
    with pytest.raises(SystemExit) as refused:
        main(["create", IMAGE, "--url", facade.url, "--token", "t", "--no-wait", flag])
    assert refused.value.code == 2
    error = capsys.readouterr().err
    assert f"argument {flag.split('=')[0]}" in error and complaint in error
    assert len(facade.seen) == sent
