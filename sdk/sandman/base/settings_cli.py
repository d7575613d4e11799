"""The command line and environment of a settings class (:mod:`sandman.base.settings` has
the rules): the parser, the parse, and the way back from an object to its argv.

Why argparse underneath: its usage line, ``--help`` and error messages are what operators
expect; every flag is added with the default ``SUPPRESS``, so what was not given is left to
the environment, then to the default object, and an empty command line gives exactly the
default object (not a copy of each default, which could drift from it). Errors, also the
ValueErrors of a class's ``__post_init__``, go through ``parser.error``: a usage line, one
message, exit status 2, never a traceback.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import os

from sandman.base.settings import (
    MISSING,
    Option,
    Spec,
    default_of,
    default_text,
    flag_name,
    options,
    spec_of,
)

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only: ``typing`` is not imported at run time
    from collections.abc import Callable, Iterator, Mapping, Sequence
    from typing import Any, TypeVar

    T = TypeVar("T")

__all__ = ["from_args", "parse", "parser", "to_argv"]

_TRUE, _FALSE = ("1", "true", "yes", "on"), ("0", "false", "no", "off", "")


def _converter(o: Option) -> Callable[[str], Any]:
    typ, nullable = o.type, o.nullable

    def convert(text: str) -> Any:
        if nullable and text == "":
            return None
        if typ is float:
            value = float(text)
            if not math.isfinite(value):
                raise ValueError(text)
            return value
        return typ(text)

    convert.__name__ = f"{typ.__name__} (or empty)" if nullable else typ.__name__
    return convert


def _switch(text: str) -> bool:
    if text.strip().lower() in _TRUE + _FALSE:
        return text.strip().lower() in _TRUE
    raise ValueError(f"not a boolean: {text!r} (1/0, true/false, yes/no, on/off)")


def parser(
    cls: type,
    *,
    prog: str,
    description: str | None = None,
    usage: str = "%(prog)s [options]",
    defaults: Any = None,
) -> argparse.ArgumentParser:
    """An argparse parser with a flag per setting of ``cls`` (every default ``SUPPRESS``:
    what was not given is left to the environment, then to the default object). The usage
    line is short: a process has dozens of flags, ``--help`` lists them by part.
    ``defaults``: the object the flags change, for a tool whose defaults are not the
    class's (default: ``cls()``'s values)."""
    epilog = (
        "A flag wins over the environment, the environment over the default; a setting that "
        "may be none is none with an empty value (--x=)."
    )
    p = argparse.ArgumentParser(prog=prog, description=description, usage=usage, epilog=epilog)
    groups: dict[str, Any] = {}
    for o in options(cls, defaults):
        target: Any = p
        if len(o.path) > 1 or o.kind == "part":
            top = next(f for f in dataclasses.fields(cls) if f.name == o.path[0])
            if o.path[0] not in groups:
                groups[o.path[0]] = p.add_argument_group(
                    flag_name(o.path[:1]), spec_of(cls, top).help
                )
            target = groups[o.path[0]]
        _add(target, o)
    return p


def _add(target: Any, o: Option) -> None:
    env = f"; ${o.env}" + (f" or the file named by ${o.env}_FILE" if o.kind == "secret" else "")
    text = f"{o.spec.help} (default: {default_text(o)}{env if o.env else ''})"
    text = text.replace("%", "%%")
    common = {"dest": o.dest, "default": argparse.SUPPRESS, "help": text}
    if o.kind in ("switch", "part"):
        target.add_argument(o.flag, action=argparse.BooleanOptionalAction, **common)
    elif o.kind == "secret":
        target.add_argument(o.flag, metavar="PATH", **common)
    else:
        metavar = "{" + ",".join(o.spec.choices) + "}" if o.spec.choices else _metavar(o)
        target.add_argument(
            o.flag, type=_converter(o), choices=o.spec.choices, metavar=metavar, **common
        )


def _metavar(o: Option) -> str:
    by_unit = {"s": "SECONDS", "bytes": "BYTES", "/s": "PER_S"}
    return by_unit.get(o.unit or "") or {int: "N", float: "X"}.get(o.type, "TEXT")


def parse(
    cls: type[T],
    argv: Sequence[str] | None = None,
    *,
    prog: str,
    description: str | None = None,
    environ: Mapping[str, str] | None = None,
    defaults: T | None = None,
) -> T:
    """The settings of ``cls`` from a command line and the environment (``os.environ``)."""
    p = parser(cls, prog=prog, description=description, defaults=defaults)
    return from_args(cls, p.parse_args(argv), p, environ, defaults)


def from_args(
    cls: type[T],
    args: argparse.Namespace,
    p: argparse.ArgumentParser,
    environ: Mapping[str, str] | None = None,
    defaults: T | None = None,
) -> T:
    """The settings from parsed ``args`` (of :func:`parser`, maybe with flags of the
    process's own added) and ``environ``; errors through ``p.error`` (exit status 2)."""
    environ = os.environ if environ is None else environ
    given: dict[tuple[str, ...], Any] = {}
    for o in options(cls, defaults):
        value = _given(o, vars(args), environ, p)
        if value is not MISSING:
            given[o.path] = value
        elif o.default is MISSING:
            p.error(_missing(o))
    try:
        return _build(cls, defaults, given, (), p)
    except ValueError as e:
        p.error(str(e))


def _given(o: Option, args: dict[str, Any], environ: Mapping[str, str], p: Any) -> Any:
    """The value given for ``o`` (flag, then environment), MISSING if none was."""
    if o.kind == "secret":
        return _secret(o, args, environ, p)
    if o.dest in args:
        return args[o.dest]
    if o.env is None or o.env not in environ:
        return MISSING
    text = environ[o.env]
    try:
        value = _switch(text) if o.kind == "switch" else _converter(o)(text)
    except ValueError:
        p.error(f"${o.env}: invalid {o.type.__name__} value: {text!r}")
    if o.spec.choices is not None and value not in o.spec.choices:
        p.error(f"${o.env}: invalid choice: {text!r} (choose from {', '.join(o.spec.choices)})")
    return value


def _secret(o: Option, args: dict[str, Any], environ: Mapping[str, str], p: Any) -> Any:
    """From the file named by the flag or ``$X_FILE`` (a mounted Secret), else ``$X``."""
    assert o.env is not None
    path = args.get(o.dest) or environ.get(f"{o.env}_FILE")
    if not path:
        return environ.get(o.env, "").strip() or MISSING
    try:
        with open(path) as handle:
            return handle.read().strip() or MISSING
    except OSError as e:
        p.error(f"{o.flag}: {e}")


def _missing(o: Option) -> str:
    if o.kind == "secret":
        return f"no {o.path[-1]}: set {o.env} or {o.env}_FILE (or {o.flag})"
    return f"the following arguments are required: {o.flag}"


def _build(
    cls: type, base: Any, given: dict[tuple[str, ...], Any], path: tuple[str, ...], p: Any
) -> Any:
    changes: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        spec, here = spec_of(cls, f), (*path, f.name)
        if spec.kind == "setting" and here in given:
            changes[f.name] = given[here]
        elif spec.kind == "part":
            current = default_of(f, base)
            value = _build_part(spec, current, given, here, p)
            if value is not current:
                changes[f.name] = value
    if base is None:
        return cls(**changes)
    return dataclasses.replace(base, **changes) if changes else base


def _build_part(
    spec: Spec, current: Any, given: dict[tuple[str, ...], Any], here: tuple[str, ...], p: Any
) -> Any:
    assert spec.part is not None
    switch = given.get(here)
    inner = sorted(flag_name(k) for k in given if len(k) > len(here) and k[: len(here)] == here)
    if switch is False or (current is None and switch is None):
        if inner:
            p.error(f"{', '.join(inner)}: {flag_name(here)} is off (--no-... or its default)")
        return None
    return _build(spec.part, current, given, here, p)


def to_argv(settings: Any) -> list[str]:
    """The command line that gives ``settings`` back (every flag whose value is not the
    default; secrets are not argv: give them in the environment)."""
    return list(_argv(type(settings), settings, None, ()))


def _argv(cls: type, value: Any, defaults: Any, path: tuple[str, ...]) -> Iterator[str]:
    for f in dataclasses.fields(cls):
        spec, here = spec_of(cls, f), (*path, f.name)
        mine, default = getattr(value, f.name), default_of(f, defaults)
        if spec.kind == "fixed" or spec.secret:
            continue
        if spec.kind == "part":
            assert spec.part is not None
            if (mine is None or default is None) and mine is not default:
                yield flag_name(here) if mine is not None else "--no-" + flag_name(here)[2:]
            if mine is not None:
                yield from _argv(spec.part, mine, default, here)
        elif mine != default or default is MISSING:
            if isinstance(mine, bool):
                flag = flag_name(path if f.name == "enabled" and path else here)
                yield flag if mine else "--no-" + flag[2:]
            else:
                yield f"{flag_name(here)}={_text(mine)}"


def _text(value: Any) -> str:
    if value is None:
        return ""
    return repr(value) if isinstance(value, float) else str(value)
