# Generated from sandman/wire/facade.py by `make generate` (codegen): do not edit.
"""``CreateOptions``: the keywords of a create, one per field of the create request.

``AsyncSandman.create``/``create_many`` and their blocking twins take them as
``**spec: Unpack[CreateOptions]``, so type checkers and IDEs know every keyword, its type and
(on hover) its meaning and default. Generated from ``sandman.wire.facade.CreateSandbox``
(``codegen.create_options``); it holds no defaults: a keyword left out is left out of the
request, which then gets the Struct's default, the one the facade applies.
"""

from __future__ import annotations

from typing import TypedDict

__all__ = ["CreateOptions"]


class CreateOptions(TypedDict, total=False):
    """The fields of ``sandman.wire.facade.CreateSandbox`` a create takes as keywords:
    all but ``image`` (the positional argument) and ``owner`` (the client's)."""

    sandbox_class: str
    """The sandbox class: CPU, memory, runtime (GET /v1/classes). Default: ``"tiny"``."""

    ttl_s: int
    """Seconds after its creation the sandbox is deleted. Default: ``3600``."""

    idle_timeout_s: int | None
    """Seconds without a tool call after which it ends; unset: never. Default: ``None``."""

    env: dict[str, str] | None
    """Environment variables of every command run in the sandbox. Default: ``{}``."""

    labels: dict[str, str] | None
    """Labels to find the sandbox by (list ?label=k=v). Default: ``{}``."""
