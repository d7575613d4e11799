"""The create request's fields as a caller offers them, read from their one definition.

The create request is ``sandman.wire.facade.CreateSandbox``, the Struct the facade decodes
and validates. Everything on the trainer's side that offers its fields reads them from there
— names, types, defaults, descriptions — instead of spelling them out again:

- ``AsyncSandman.create``/``create_many`` (and their generated blocking twins) take the
  fields as keywords, ``**spec: Unpack[CreateOptions]``, and hand on only what the caller
  gave (``build_spec``): the defaults a trainer gets are the Struct's, the same ones the
  facade applies to a body that names none, and the validation is the facade's decode of
  the same Struct (its reasons, ``invalid_env``, ``invalid_label``..., included);
- ``help()`` shows the fields with their types and defaults (``with_create_options``
  appends ``options_help()`` to those methods' docstrings);
- ``sandman create`` builds one flag per field at run time (``sandman.cli``), each value
  checked against the field's own type and bounds as it is parsed;
- the development tools (``codegen``, not in the SDK's wheel) write ``CreateOptions``, the
  TypedDict type checkers and IDEs read the keywords from, and the trainer guide's table of
  create fields, from ``create_fields()``; a test holds both to what they would write now.

Why ``**spec: Unpack[CreateOptions]`` and not an explicit keyword list generated into each
signature: the list would be written three times again (``create``, ``create_many``, and
the call that builds the Struct), each with a copy of every default, in generated regions
inside hand-written methods. With the TypedDict the fields are written once, generated, and
carry no defaults at all: nothing on this side can default differently from the facade.
Type checkers (PEP 692) and IDEs complete and check the keywords all the same, and trainers'
calls (``client.create(image, ttl_s=600, env={...})``) are unchanged. A keyword given as
``None`` counts as not given (``env=None`` was the old spelling of "no variables").

Why here, in the wire layer, and not in the SDK: it needs msgspec only, and the generators
must read the fields without importing the SDK, whose package imports what they generate.
"""

from __future__ import annotations

import functools
import inspect
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

import msgspec

from .facade import CreateSandbox

__all__ = [
    "NOT_OPTIONS",
    "CreateField",
    "annotation_text",
    "build_spec",
    "create_fields",
    "options_help",
    "with_create_options",
]

F = TypeVar("F", bound=Callable[..., Any])
#: Fields of the request that are not keywords of a create: the image is its positional
#: argument, the owner the client's own.
NOT_OPTIONS = ("image", "owner")


@dataclass(frozen=True)
class CreateField:
    """One field of the create request as the trainer's side offers it."""

    #: The keyword (the Struct's attribute name), e.g. ``sandbox_class``.
    name: str
    #: The JSON name on the wire, e.g. ``class``.
    wire_name: str
    #: The field's type with its constraints (``Annotated``): what a value is checked against.
    checked_type: Any
    #: The same type without constraints, e.g. ``int | None``: what a signature shows.
    plain_type: Any
    #: What a create that leaves the field out gets.
    default: Any
    description: str

    @property
    def is_mapping(self) -> bool:
        """A ``dict`` field (``env``, ``labels``): given entry by entry on a command line."""
        return typing.get_origin(self.plain_type) is dict

    @property
    def keyword_type(self) -> Any:
        """The keyword's type: the field's, and ``None`` besides for a mapping (no entries)."""
        return self.plain_type | None if self.is_mapping else self.plain_type


@functools.cache
def create_fields() -> tuple[CreateField, ...]:
    """The create request's fields that are keywords of a create, in the Struct's order."""
    checked = typing.get_type_hints(CreateSandbox, include_extras=True)
    plain = typing.get_type_hints(CreateSandbox)
    found = []
    for info in msgspec.inspect.type_info(CreateSandbox).fields:  # type: ignore[attr-defined]
        if info.name in NOT_OPTIONS:
            continue
        factory = info.default_factory
        schema = getattr(info.type, "extra_json_schema", None) or {}
        field = CreateField(
            name=info.name,
            wire_name=info.encode_name,
            checked_type=checked[info.name],
            plain_type=plain[info.name],
            default=info.default if factory is msgspec.NODEFAULT else factory(),
            description=schema.get("description", ""),
        )
        found.append(field)
    return tuple(found)


def build_spec(image: str, owner: str, options: Mapping[str, Any]) -> CreateSandbox:
    """The request for ``image``: the given options, the Struct's defaults for the rest.

    An unknown keyword is a ``TypeError``, as for any Python call; values are checked by
    the facade's decode of the same Struct (a ``400`` naming the field)."""
    given = {name: value for name, value in options.items() if value is not None}
    return CreateSandbox(image=image, owner=owner, **given)


def annotation_text(tp: Any) -> str:
    """``tp`` as source text: ``int | None``, ``dict[str, str]``."""
    if tp is type(None):
        return "None"
    origin = typing.get_origin(tp)
    if origin in (types.UnionType, typing.Union):
        return " | ".join(annotation_text(a) for a in typing.get_args(tp))
    if origin is not None:
        return f"{origin.__name__}[{', '.join(annotation_text(a) for a in typing.get_args(tp))}]"
    if isinstance(tp, type) and tp.__module__ == "builtins":
        return tp.__name__
    raise TypeError(f"no source spelling for {tp!r}: extend annotation_text")


@functools.cache
def options_help() -> str:
    """The docstring section ``help(client.create)`` shows: each field, type, default."""
    lines = [
        "Create options: the fields of the request (sandman.wire.facade.CreateSandbox) as",
        "keywords; one left out, or given as None, gets the default shown.",
        "",
    ]
    for field in create_fields():
        lines.append(f"{field.name}: {annotation_text(field.plain_type)} = {field.default!r}")
        lines.append(f"    {field.description}")
    return "\n".join(lines)


def with_create_options(method: F) -> F:
    """Append the create request's fields (``options_help``) to ``help(method)``."""
    method.__doc__ = f"{inspect.cleandoc(method.__doc__ or '')}\n\n{options_help()}"
    return method
