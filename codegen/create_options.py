"""The create request's fields, written out where they must be spelled: a type and a table.

Both are read from ``sandman.wire.create_request.create_fields()``, which reads the create
request ``sandman.wire.facade.CreateSandbox``:

- ``sandman/sdk/create_options.py``: ``CreateOptions``, the TypedDict of a create's
  keywords (``**spec: Unpack[CreateOptions]``). It must be source, not built at run time,
  because type checkers and IDEs read source; each key carries the field's description and
  default as its docstring (what an IDE shows on hover), and no default of its own;
- the trainer guide's table of create fields: keyword, ``sandman create`` flag (as
  ``sandman.cli`` builds it), JSON field, type, default, meaning.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from sandman.wire.create_request import CreateField, annotation_text, create_fields

from .files import ROOT, Output, header, python_module, replace_region

__all__ = ["OUTPUTS"]

MODULE = Path("sdk/sandman/sdk/create_options.py")
GUIDE = Path("docs/trainer-guide.md")
_DOC = '''"""``CreateOptions``: the keywords of a create, one per field of the create request.

``AsyncSandman.create``/``create_many`` and their blocking twins take them as
``**spec: Unpack[CreateOptions]``, so type checkers and IDEs know every keyword, its type and
(on hover) its meaning and default. Generated from ``sandman.wire.facade.CreateSandbox``
(``codegen.create_options``); it holds no defaults: a keyword left out is left out of the
request, which then gets the Struct's default, the one the facade applies.
"""
'''


def _default_text(value: Any) -> str:
    """A default as a trainer would write it: ``"tiny"``, ``3600``, ``None``, ``{}``."""
    return json.dumps(value) if isinstance(value, str) else repr(value)


def _key(field: CreateField) -> str:
    doc = f"{field.description[:1].upper()}{field.description[1:]}."
    default = f"Default: ``{_default_text(field.default)}``."
    return f'    {field.name}: {annotation_text(field.keyword_type)}\n    """{doc} {default}"""\n'


def render_module() -> str:
    keys = "\n".join(_key(f) for f in create_fields())
    source = (
        f"{header('sandman/wire/facade.py')}{_DOC}\n"
        "from __future__ import annotations\n\n"
        "from typing import TypedDict\n\n"
        '__all__ = ["CreateOptions"]\n\n\n'
        "class CreateOptions(TypedDict, total=False):\n"
        '    """The fields of ``sandman.wire.facade.CreateSandbox`` a create takes as keywords:\n'
        '    all but ``image`` (the positional argument) and ``owner`` (the client\'s)."""\n\n'
        f"{keys}"
    )
    return python_module(MODULE, source)


def table() -> str:
    from sandman.cli import create_flag  # the SDK, hence what the other outputs generate

    rows = [
        "| keyword | `sandman create` | JSON field | type | default | meaning |",
        "|---|---|---|---|---|---|",
    ]
    for field in create_fields():
        flag, metavar = create_flag(field)
        repeat = " (repeated)" if field.is_mapping else ""
        kind = annotation_text(field.plain_type).replace("|", "\\|")
        cells = [f"`{field.name}`", f"`{flag} {metavar}`{repeat}", f"`{field.wire_name}`",
                 f"`{kind}`", f"`{_default_text(field.default)}`", field.description]  # fmt: skip
        rows.append("| " + " | ".join(cells) + " |")
    return "\n".join(rows)


def render_guide() -> str:
    """The guide as it is, with its table of create fields as the Struct says."""
    return replace_region((ROOT / GUIDE).read_text(), "create fields", table())


OUTPUTS = (Output(MODULE, render_module), Output(GUIDE, render_guide))
