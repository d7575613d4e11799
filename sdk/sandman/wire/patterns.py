"""String rules shared by the wire models, in a module of their own so that processes which
need one of them (the node agent reads image references) do not load every model of the
facade's API (0.7 MiB of the agent's 50 MiB budget).

**Patterns are written for two regex engines.** The server checks them with Python's ``re``
(msgspec), a JSON Schema reader with ECMA-262's. They agree except at ``$``, which in Python
also matches before a final newline (``"run-1\\n"`` would pass ``^[a-z0-9-]+$``); every
pattern therefore ends in ``$(?!\\n)`` (:func:`whole`), which means "end of the string" in
both.
"""

from __future__ import annotations

from typing import Annotated, Final

import msgspec

__all__ = ["LABEL_NAME_PATTERN", "LABEL_VALUE_PATTERN", "ImageRef", "OwnerName", "whole"]


def whole(body: str) -> str:
    """A pattern matching whole strings alike in Python and ECMA-262 (module docstring)."""
    return f"^(?:{body})$(?!\\n)"


#: OCI references are printable ASCII without spaces.
ImageRef = Annotated[str, msgspec.Meta(min_length=1, max_length=512, pattern=whole("[!-~]+"))]


_LABEL_NAME = r"[A-Za-z0-9](?:[-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"
_LABEL_VALUE = r"(?:[A-Za-z0-9](?:[-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?"
#: A Kubernetes label name (the part after the prefix) and label value.
LABEL_NAME_PATTERN: Final = whole(_LABEL_NAME)
LABEL_VALUE_PATTERN: Final = whole(_LABEL_VALUE)
#: An owner (a trainer run) is a label value on its pods, and never empty.
OwnerName = Annotated[
    str,
    msgspec.Meta(
        min_length=1,
        max_length=63,
        pattern=LABEL_VALUE_PATTERN,
        description="a Kubernetes label value, 1-63 characters",
    ),
]
