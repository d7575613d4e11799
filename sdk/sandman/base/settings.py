"""Settings written once: each field carries its name, unit, default and help, and every
process's command line, environment names and docs table are generated from the fields.

Why: a setting used to be written three times (the dataclass field, an argparse flag with a
name of its own, the constructor call copying one into the other), and the copies drifted:
``--terminal-retention`` set ``gc.terminal_retention_s``, ``--qps`` set ``client.qps``,
``--leader-wait-s`` sat beside ``--lease-duration``, and one flag silently set a second field
(``--gc-qps`` also set the GC's burst). With the field as the only definition there is
nothing left to keep equal, and no test that only checks copies.

The rules, so that a flag's name can be guessed from the code and the code from the flag:

- A settings class is a frozen dataclass whose every field is declared with :func:`setting`
  (a value), :func:`part` (a nested settings class) or :func:`fixed` (not an operator's
  setting: a name other processes rely on, a Python object; it says why).
- A flag is the field's path with dashes: ``gc.terminal_retention_s`` is
  ``--gc-terminal-retention-s``, so a part's flags share its prefix. The unit is the name's
  suffix (:data:`UNITS`: ``_s``, ``_bytes``, ``_per_s``, ``qps``); a float setting without
  one says ``dimensionless=True`` (a factor, a weight), so a unit cannot go unwritten.
- A ``bool`` is ``--x`` / ``--no-x``; a part's field ``enabled`` is the part's own switch
  (``--client-pacer`` / ``--no-client-pacer``), and so is an optional part's presence
  (``--prepare`` / ``--no-prepare``; its other flags need it on).
- ``T | None``: an empty value is None (``--view-namespace=``, ``SANDMAN_WORKDIR=``).
- ``env=True``: also read from ``<ENV_PREFIX><NAME>`` (``ENV_PREFIX``: a class attribute of
  the settings class), or ``env="NAME"`` where the platform fixes the name (the downward
  API's ``NODE_NAME``). A flag wins over the environment, the environment over the default.
- ``secret=True``: never a flag's value (``ps`` shows every argv): read from ``$X``, or
  from the file named by ``--x-file`` / ``$X_FILE`` (a mounted Secret), which wins.
- ``derived="..."``: the default is computed from other settings and says how (the field
  holds None unless given; the class computes the value, e.g. a property).
- Ranges are checked where they always were, in ``__post_init__``; a ValueError raised
  there is reported like argparse's own errors (usage, message, exit status 2).

Here: the definitions (:func:`setting`, :func:`part`, :func:`fixed`), the naming rule and
the flags it gives (:func:`options`), the docs' tables (:func:`table`). The command line is
:mod:`sandman.base.settings_cli`: parsing an empty one gives exactly the default object,
and any settings object comes back from the command line it prints. Stdlib only, at the
bottom layer, since the sandbox daemon uses it.
"""

from __future__ import annotations

import dataclasses

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only: ``typing`` is not imported at run time
    from collections.abc import Iterator, Sequence
    from typing import Any

__all__ = [
    "LOG_LEVELS",
    "MISSING",
    "UNITS",
    "Option",
    "Spec",
    "default_of",
    "default_text",
    "env_name",
    "env_of",
    "fixed",
    "flag_name",
    "options",
    "part",
    "setting",
    "show",
    "spec_of",
    "table",
    "unit_of",
]

KEY = "sandman.settings"
MISSING = dataclasses.MISSING
#: Name suffix -> unit, longest first (``_per_s`` before ``_s``).
UNITS = (("_bytes", "bytes"), ("_per_s", "/s"), ("_s", "s"), ("qps", "/s"))
#: What a process's ``log_level`` setting takes (the logging module's names).
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
_SCALARS: dict[str, type] = {"int": int, "float": float, "str": str, "bool": bool}


class Spec:
    """What a field says about itself (its ``metadata[KEY]``)."""

    __slots__ = (
        "choices", "derived", "dimensionless", "env", "help", "kind", "optional", "part", "secret",
    )  # fmt: skip

    def __init__(self, kind: str, help: str, **facts: Any) -> None:
        if not help.strip():
            raise TypeError("a setting needs its help (or, fixed, its reason)")
        self.kind, self.help = kind, " ".join(help.split())
        self.env: bool | str = facts.get("env", False)
        self.secret: bool = facts.get("secret", False)
        self.derived: str | None = facts.get("derived")
        self.choices: tuple[str, ...] | None = facts.get("choices")
        self.dimensionless: bool = facts.get("dimensionless", False)
        self.part: type | None = facts.get("part")
        self.optional: bool = facts.get("optional", False)


def setting(
    default: Any = MISSING,
    *,
    help: str,
    env: bool | str = False,
    secret: bool = False,
    derived: str | None = None,
    choices: Sequence[str] | None = None,
    dimensionless: bool = False,
) -> Any:
    """A field that is a setting (module docstring for each argument's rule)."""
    if derived is not None and default is not None:
        raise TypeError("a derived setting's default is None (computed when not given)")
    if secret and not env:
        raise TypeError("a secret is read from the environment: give env")
    picks = tuple(choices) if choices is not None else None
    spec = Spec("setting", help, env=env, secret=secret, derived=derived, choices=picks,
                dimensionless=dimensionless)  # fmt: skip
    if default is MISSING:
        return dataclasses.field(metadata={KEY: spec})
    return dataclasses.field(default=default, metadata={KEY: spec})


def part(cls: type, *, help: str, default: Any = MISSING, optional: bool = False) -> Any:
    """A nested settings class; ``default``: an instance whose values differ from the
    class's (the facade's client), or None (an optional part that is off by default)."""
    factory = cls if default is MISSING else (lambda: default)
    spec = Spec("part", help, part=cls, optional=optional or default is None)
    return dataclasses.field(default_factory=factory, metadata={KEY: spec})


def fixed(default: Any = MISSING, *, why: str, default_factory: Any = MISSING) -> Any:
    """A field that is not an operator's setting (no flag, no docs row); ``why`` says why."""
    metadata = {KEY: Spec("fixed", why)}
    if default_factory is not MISSING:
        return dataclasses.field(default_factory=default_factory, metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


def flag_name(path: Sequence[str]) -> str:
    """``("gc", "terminal_retention_s")`` -> ``--gc-terminal-retention-s``."""
    return "--" + "-".join(path).replace("_", "-")


def env_name(prefix: str, name: str) -> str:
    """``("SANDMAN_", "idle_timeout_s")`` -> ``SANDMAN_IDLE_TIMEOUT_S``."""
    return prefix + name.upper()


def env_of(cls: type, name: str) -> str:
    """The environment variable field ``name`` of ``cls`` is read from, for a process that
    sets it for another (the facade's pod spec for the daemon); KeyError if there is none."""
    for f in dataclasses.fields(cls):
        if f.name == name and (env := _env(cls, f, spec_of(cls, f))) is not None:
            return env
    raise KeyError(f"{cls.__qualname__}.{name} is read from no environment variable")


def unit_of(name: str) -> str | None:
    """The unit a field's name ends with (:data:`UNITS`), or None."""
    for suffix, unit in UNITS:
        word = suffix.lstrip("_")
        if name == word or name.endswith(f"_{word}"):
            return unit
    return None


class Option:
    """One generated flag: a value, a ``switch`` (bool), a ``part`` (an optional part's
    presence) or a ``secret`` (its file flag); ``path``: the field names from the top."""

    __slots__ = ("default", "env", "flag", "kind", "nullable", "path", "spec", "type")

    def __init__(
        self, path: tuple[str, ...], flag: str, kind: str, spec: Spec, **facts: Any
    ) -> None:
        self.path, self.flag, self.kind, self.spec = path, flag, kind, spec
        self.type: type = facts.get("type", bool)
        self.nullable: bool = facts.get("nullable", False)
        self.default: Any = facts["default"]
        self.env: str | None = facts.get("env")

    @property
    def dest(self) -> str:
        return ".".join(self.path)

    @property
    def unit(self) -> str | None:
        return unit_of(self.path[-1]) if self.kind == "value" else None


def options(cls: type, defaults: Any = None) -> list[Option]:
    """Every flag of ``cls``, in field order, parts after their parent's switch; their
    defaults from ``defaults`` (an instance of ``cls``), else from the fields."""
    return list(_walk(cls, defaults, ()))


def _walk(cls: type, defaults: Any, path: tuple[str, ...]) -> Iterator[Option]:
    for f in dataclasses.fields(cls):
        spec = spec_of(cls, f)
        if spec.kind == "fixed":
            continue
        here, default = (*path, f.name), default_of(f, defaults)
        if spec.kind == "part":
            assert spec.part is not None
            if spec.optional:
                yield Option(here, flag_name(here), "part", spec, default=default is not None)
            yield from _walk(spec.part, default, here)
            continue
        typ, nullable = _scalar(cls, f)
        if typ is float and unit_of(f.name) is None and not spec.dimensionless:
            raise TypeError(
                f"{_where(cls, f)}: name its unit (_s, _bytes...) or dimensionless=True"
            )
        env = _env(cls, f, spec)
        if spec.secret:
            yield Option(
                here, flag_name(here) + "-file", "secret", spec, type=str, default=default, env=env
            )
        elif typ is bool:
            flag = flag_name(path if f.name == "enabled" and path else here)
            yield Option(here, flag, "switch", spec, default=default, env=env)
        else:
            yield Option(here, flag_name(here), "value", spec, type=typ, nullable=nullable,
                         default=default, env=env)  # fmt: skip


def spec_of(cls: type, f: dataclasses.Field[Any]) -> Spec:
    """The field's declaration; TypeError for a field declared without this module."""
    spec = f.metadata.get(KEY)
    if not isinstance(spec, Spec):
        raise TypeError(f"{_where(cls, f)}: declare it with setting(), part() or fixed()")
    return spec


def _where(cls: type, f: dataclasses.Field[Any]) -> str:
    return f"{cls.__qualname__}.{f.name}"


def default_of(f: dataclasses.Field[Any], defaults: Any) -> Any:
    """The field's default: its value in ``defaults`` (the parent's default object), else
    its own default (MISSING for a required field)."""
    if defaults is not None:
        return getattr(defaults, f.name)
    if f.default_factory is not MISSING:
        return f.default_factory()
    return f.default


def _scalar(cls: type, f: dataclasses.Field[Any]) -> tuple[type, bool]:
    text = f.type if isinstance(f.type, str) else getattr(f.type, "__name__", str(f.type))
    names = [name.strip() for name in text.split("|")]
    rest = [name for name in names if name != "None"]
    if len(rest) != 1 or rest[0] not in _SCALARS:
        raise TypeError(
            f"{_where(cls, f)}: a setting is int, float, str or bool (| None), not {text}"
        )
    return _SCALARS[rest[0]], len(rest) < len(names)


def _env(cls: type, f: dataclasses.Field[Any], spec: Spec) -> str | None:
    if isinstance(spec.env, str):
        return spec.env
    if not spec.env:
        return None
    prefix = getattr(cls, "ENV_PREFIX", None)
    if not isinstance(prefix, str):
        raise TypeError(f"{_where(cls, f)}: env=True needs the class's ENV_PREFIX")
    return env_name(prefix, f.name)


def show(value: Any, unit: str | None = None) -> str:
    """A value as the docs and ``--help`` print it: ``60 s``, ``16777216 (16 MiB)``, ``on``."""
    if value is MISSING:
        return "required"
    if value is None:
        return "none"
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, str):
        return value or '""'
    text = f"{value:g}" if isinstance(value, float) and float(f"{value:g}") == value else str(value)
    if unit == "bytes" and value >= 1024:
        for name, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
            if value % size == 0:
                return f"{text} ({value // size} {name})"
    return {"s": f"{text} s", "/s": f"{text}/s"}.get(unit or "", text)


def default_text(o: Option) -> str:
    """The default column: the value, or how a derived default is computed."""
    if o.spec.derived is not None and o.default is None:
        return f"derived: {o.spec.derived}"
    return show(o.default, o.unit)


def table(cls: type) -> str:
    """The docs' tables of ``cls``: its own settings, then one table per part."""
    sections: dict[str, list[Option]] = {}
    for o in options(cls):
        sections.setdefault(o.path[0] if len(o.path) > 1 or o.kind == "part" else "", []).append(o)
    with_env = any(o.env for o in options(cls))
    out: list[str] = []
    for name, rows in sections.items():
        if name:
            top = next(f for f in dataclasses.fields(cls) if f.name == name)
            out += ["", f"**`{flag_name((name,))}-…`**: {spec_of(cls, top).help}", ""]
        out += _rows(rows, with_env)
    return "\n".join(out).strip("\n") + "\n"


def _rows(rows: list[Option], with_env: bool) -> list[str]:
    head = ["flag", *(["environment"] if with_env else []), "default", "what it sets"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for o in rows:
        flag = f"`{o.flag}`"
        if o.kind in ("switch", "part"):
            flag += f", `--no-{o.flag[2:]}`"
        env = ""
        if o.env:
            env = f"`{o.env}`" + (f", `{o.env}_FILE`" if o.kind == "secret" else "")
        cells = [flag, *([env] if with_env else []), default_text(o), o.spec.help]
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return lines
