"""Every generated file is what its generator writes now: ``make generate`` was run.

The blocking SDK, the ``CreateOptions`` TypedDict and the trainer guide's table of create
fields are written from their definitions by ``codegen`` (its docstring lists them). A
definition changed without regenerating leaves a file stale, and this says which. The
generator's refusals are checked too: a member of an async class no rule covers must stop
the generator, never be skipped or guessed at.
"""

from __future__ import annotations

import ast

import pytest

from codegen.__main__ import OUTPUTS
from codegen.blocking import GenerationError, Twin, _Class, _Names
from codegen.files import Output, replace_region


@pytest.mark.parametrize("output", OUTPUTS, ids=lambda o: str(o.path))
def test_the_generated_file_is_what_its_generator_writes(output: Output) -> None:
    assert output.file.read_text() == output.render(), f"{output.path} is stale: make generate"


def test_every_generated_module_says_so_on_its_first_line() -> None:
    for output in OUTPUTS:
        if output.path.suffix == ".py":
            first = output.file.read_text().splitlines()[0]
            assert first.startswith("# Generated from ") and "make generate" in first


@pytest.mark.parametrize(
    ("member", "complaint"),
    [
        ("def pair(self) -> list[AsyncX]: ...", "returns async objects unwrapped"),
        ("@retried\nasync def ping(self) -> None: ...", "decorated"),
        ("async def adopt(self, other: AsyncX) -> None: ...", "takes an async object"),
        ("async def pair(self) -> tuple[AsyncX, int]: ...", "returns async objects"),
        ("items: dict[str, AsyncX]", "an attribute holding async objects"),
        ("x = 1", "a class-level Assign"),
    ],
)
def test_a_member_no_rule_covers_stops_the_generator(member: str, complaint: str) -> None:
    source = "class AsyncX:\n" + "\n".join(f"    {line}" for line in member.splitlines())
    node = ast.parse(source).body[0]
    assert isinstance(node, ast.ClassDef)
    twin = Twin("sandman.sdk.x", "AsyncX", "X")
    with pytest.raises(GenerationError, match=complaint):
        _Class(twin, node, {"AsyncX": twin}, _Names("sandman.sdk.blocking.x")).render()


def test_plain_and_async_only_members() -> None:
    """A plain method forwards (its async SDK result wrapped); ``@async_only`` has no twin."""
    source = (
        "class AsyncX:\n"
        "    def url(self, port: int) -> str: ...\n"
        "    def child(self) -> AsyncX: ...\n"
        "    @async_only\n"
        "    async def socket(self) -> int: ...\n"
    )
    node = ast.parse(source).body[0]
    assert isinstance(node, ast.ClassDef)
    twin = Twin("sandman.sdk.x", "AsyncX", "X")
    text = _Class(twin, node, {"AsyncX": twin}, _Names("sandman.sdk.blocking.x")).render()
    assert "        return self._async.url(port)\n" in text
    assert "        return self._wrap(X, self._async.child())\n" in text
    assert "socket" not in text


def test_a_region_is_replaced_between_its_markers_only() -> None:
    begin = "<!-- generated: t (make generate); edits here are overwritten -->"
    end = "<!-- end of generated: t -->"
    text = f"before\n{begin}\nold\n{end}\nafter\n"
    assert replace_region(text, "t", "new") == f"before\n{begin}\nnew\n{end}\nafter\n"
    with pytest.raises(ValueError, match="expected one region"):
        replace_region("no markers", "t", "new")
