"""The trainer's ``sandman`` command: ``create``, ``exec``, ``ls``, ``rm``, ``prepare``.

For poking at a running Sandman by hand (and for shell scripts): every command is a thin use
of the SDK, with the connection from ``--url``/``--token`` or ``SANDMAN_URL``/
``SANDMAN_TOKEN``. The CLI holds no owner lease and releases nothing on exit — sandboxes it
creates live until ``sandman rm`` or their TTL. Failures print ``error: <reason>: <message>``
and exit non-zero; ``exec`` exits with the command's own exit code.

``sandman create``'s request flags are not written here: one flag per field of the create
request (``sandman.wire.facade.CreateSandbox``, read through ``sandman.wire.create_request``),
built when the parser is, named after the field's JSON name (``--class``, ``--ttl-s``,
``--idle-timeout-s``; a mapping's entries one ``K=V`` per flag, in the singular: ``--env``,
``--label``), its help the field's description and default, its value checked against the
field's type and bounds as it is parsed. A flag not given is not sent, so the facade applies
the Struct's default, as for the SDK. Durations are spelled with their unit, ``-s``, on
every command.
"""

from __future__ import annotations

import argparse
import asyncio
import getpass
import os
import sys
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import msgspec

from .sdk import AsyncSandman, PreparationTimeout, SandmanError
from .wire.create_request import CreateField, create_fields
from .wire.facade import DEFAULT_CLASS
from .wire.image_preparation import DEFAULT_PREPARE_TTL_S

__all__ = ["create_flag", "create_options", "main", "parse_args"]

Command = Callable[[AsyncSandman, argparse.Namespace], Awaitable[int]]
EXIT_TIMEOUT = 124  # as coreutils' timeout(1)


def _pairs(values: list[str] | None, what: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in values or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise SystemExit(f"error: invalid_{what}: {item!r} is not KEY=VALUE")
        out[key] = value
    return out


def _default_owner() -> str:
    return os.environ.get("SANDMAN_OWNER") or f"cli-{getpass.getuser()}"


def create_flag(field: CreateField) -> tuple[str, str]:
    """The flag and metavar of a request field: ``("--ttl-s", "TTL_S")``, ``("--label", "K=V")``."""
    if field.is_mapping:
        return "--" + field.wire_name.removesuffix("s").replace("_", "-"), "K=V"
    return "--" + field.wire_name.replace("_", "-"), field.wire_name.upper()


def _field_value(field: CreateField) -> Callable[[str], Any]:
    """Read a flag's text as the field's type (numbers from text), bounds checked."""

    def read(text: str) -> Any:
        try:
            return msgspec.convert(text, field.checked_type, strict=False)
        except msgspec.ValidationError as e:
            raise argparse.ArgumentTypeError(f"{text!r}: {e}") from e

    return read


def _field_entry(field: CreateField) -> Callable[[str], tuple[str, str]]:
    """Read one ``K=V`` entry of a mapping field, key and value checked."""

    def read(text: str) -> tuple[str, str]:
        key, sep, value = text.partition("=")
        if not sep:
            raise argparse.ArgumentTypeError(f"{text!r} is not K=V")
        try:
            (entry,) = msgspec.convert({key: value}, field.checked_type).items()
        except msgspec.ValidationError as e:
            raise argparse.ArgumentTypeError(f"{text!r}: {e}") from e
        return entry

    return read


def _add_request_flags(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("the request (sandman.wire.facade.CreateSandbox)")
    for field in create_fields():
        flag, metavar = create_flag(field)
        text = field.description.replace("%", "%%")
        if field.is_mapping:
            group.add_argument(flag, dest=field.name, metavar=metavar, action="append",
                               type=_field_entry(field), default=argparse.SUPPRESS,
                               help=f"{text}; repeat for more")  # fmt: skip
        else:
            shown = "" if field.default is None else f" (default: {field.default})"
            group.add_argument(flag, dest=field.name, metavar=metavar, type=_field_value(field),
                               default=argparse.SUPPRESS, help=text + shown)  # fmt: skip


def create_options(args: argparse.Namespace) -> dict[str, Any]:
    """The request fields the command line gave; the others are left to their defaults."""
    given = [(f, getattr(args, f.name)) for f in create_fields() if hasattr(args, f.name)]
    return {f.name: dict(value) if f.is_mapping else value for f, value in given}


async def _create(client: AsyncSandman, args: argparse.Namespace) -> int:
    sandboxes = await client.create_many(
        args.n,
        args.image,
        wait=not args.no_wait,
        timeout_s=args.timeout_s,
        **create_options(args),
    )
    for sandbox in sandboxes:
        print(sandbox.id)
    return 0


async def _exec(client: AsyncSandman, args: argparse.Namespace) -> int:
    command = args.command_argv
    if not command:
        raise SystemExit("error: missing_command: usage: sandman exec ID -- COMMAND...")
    sandbox = await client.get(args.id)
    argv_or_shell: str | list[str] = command[0] if len(command) == 1 else command
    result = await sandbox.exec(argv_or_shell, cwd=args.cwd, timeout_s=args.timeout_s)
    sys.stdout.buffer.write(result.stdout_bytes)
    sys.stderr.buffer.write(result.stderr_bytes)
    sys.stdout.flush()
    if result.timed_out:
        print(f"error: command_timeout: killed after {args.timeout_s:g} s", file=sys.stderr)
        return EXIT_TIMEOUT
    if result.exit_code is None:
        return 128 + _signal_number(result.signal)
    return result.exit_code


def _signal_number(name: str | None) -> int:
    import signal

    try:
        return int(signal.Signals[name or "SIGKILL"])
    except KeyError:
        return int(signal.SIGKILL)


async def _ls(client: AsyncSandman, args: argparse.Namespace) -> int:
    rows = [("ID", "OWNER", "STATE", "REASON", "NODE", "IMAGE", "CREATED")]
    async for s in client.list(
        owner=args.owner,
        all_owners=args.owner is None,
        labels=_pairs(args.label, "label"),
        state=args.state,
    ):
        v = s.view
        rows.append((v.id, v.owner, v.state, v.reason or "", v.node or "", v.image,
                     v.created_at or ""))  # fmt: skip
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())
    return 0


async def _rm(client: AsyncSandman, args: argparse.Namespace) -> int:
    if bool(args.ids) == bool(args.owner):
        raise SystemExit("error: invalid_arguments: give sandbox ids or --owner, not both")
    if args.owner:
        released = await client.release_owner(args.owner)
        print(f"released {released} sandbox(es) of {args.owner}")
        return 0
    for sid in args.ids:
        sandbox = await client.get(sid)
        await sandbox.release()
        print(f"released {sid}")
    return 0


def _image_counts(values: list[str]) -> dict[str, int]:
    out: dict[str, int] = {}
    for item in values:
        image, sep, count = item.rpartition("=")
        if not sep:
            image, count = item, "1"
        if not image or not count.isdigit():
            raise SystemExit(f"error: invalid_image_count: {item!r} is not IMAGE[=COUNT]")
        out[image] = int(count)
    return out


async def _prepare(client: AsyncSandman, args: argparse.Namespace) -> int:
    if bool(args.images) == bool(args.status):
        raise SystemExit("error: invalid_arguments: give IMAGE[=COUNT]... or --status ID")
    if args.status:
        prep = await client.get_preparation(args.status)
    else:
        prep = await client.prepare(
            _image_counts(args.images),
            ttl_s=args.ttl_s,
            sandboxes=args.sandboxes,
            class_=args.sandbox_class,
        )
        print(prep.id)
    if args.wait is not None:
        try:
            await prep.wait_ready(args.wait, timeout_s=args.timeout_s)
        except PreparationTimeout as e:
            print(f"error: {e.reason}: {e.message}", file=sys.stderr)
            return EXIT_TIMEOUT
    view = prep.view
    eta = "-" if view.eta_s is None else f"{view.eta_s:g}s"
    ready = f"{prep.fraction_ready:.0%} of {view.sandboxes_expected} sandboxes"
    print(f"{view.phase} {ready} eta {eta}")
    if view.pool is not None:
        pool = view.pool
        print(
            f"  pool ({view.sandbox_class}): {pool.wanted} wanted, {pool.created} created, "
            f"{pool.ready} ready, {pool.claimed} claimed"
        )
    for image in view.images:
        failed = f" failed on {len(image.failures)}" if image.failures else ""
        # ready / wanted (the minimum the count needs), and planned (with the spread)
        nodes = f"{image.nodes_ready}/{image.nodes_wanted} nodes, {image.nodes_planned} planned"
        print(f"  {image.image}: {nodes}{failed}")
    return 0


_COMMANDS: dict[str, Command] = {
    "create": _create,
    "exec": _exec,
    "ls": _ls,
    "rm": _rm,
    "prepare": _prepare,
}


def _add_parsers(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    conn = argparse.ArgumentParser(add_help=False)
    conn.add_argument("--url", help="facade URL (default: $SANDMAN_URL)")
    conn.add_argument("--token", help="bearer token (default: $SANDMAN_TOKEN)")

    create = commands.add_parser("create", parents=[conn], help="create sandboxes; prints ids")
    create.add_argument("image")
    create.add_argument("-n", type=int, default=1, help="how many (one batch request)")
    create.add_argument("--owner", help="run id (default: $SANDMAN_OWNER or cli-USER)")
    create.add_argument("--no-wait", action="store_true", help="do not wait until ready")
    create.add_argument("--timeout-s", type=float, default=None, help="seconds to wait for ready")
    _add_request_flags(create)

    run = commands.add_parser("exec", parents=[conn], help="run a command in a sandbox")
    run.add_argument("id")
    run.add_argument("--cwd", default=None)
    run.add_argument("--timeout-s", type=float, default=60.0, help="command timeout (seconds)")
    run.add_argument("command_argv", nargs="*", metavar="-- COMMAND")

    ls = commands.add_parser("ls", parents=[conn], help="list sandboxes (all owners by default)")
    ls.add_argument("--owner", default=None)
    ls.add_argument("--state", default=None)
    ls.add_argument("--label", action="append", metavar="K=V")

    rm = commands.add_parser("rm", parents=[conn], help="release sandboxes by id or by owner")
    rm.add_argument("ids", nargs="*")
    rm.add_argument("--owner", default=None)

    prep = commands.add_parser(
        "prepare", parents=[conn], help="announce images ahead of a burst; prints the id"
    )
    prep.add_argument("images", nargs="*", metavar="IMAGE[=COUNT]", help="sandboxes expected")
    prep.add_argument("--status", metavar="ID", help="show an earlier announcement instead")
    prep.add_argument(
        "--ttl-s", type=int, default=DEFAULT_PREPARE_TTL_S, help="seconds (default %(default)s)"
    )
    prep.add_argument(
        "--sandboxes",
        action="store_true",
        help="create the sandboxes ahead too (COUNT per image), not only pull the images",
    )
    prep.add_argument(
        "--class",
        dest="sandbox_class",
        default=DEFAULT_CLASS,
        help="the announced sandboxes' class (default %(default)s)",
    )
    prep.add_argument("--wait", type=float, metavar="FRACTION", help="wait until this ready")
    prep.add_argument("--timeout-s", type=float, default=600.0, help="seconds to wait")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="sandman", description="Sandboxes for agentic RL: the trainer's command line."
    )
    _add_parsers(parser.add_subparsers(dest="command", required=True))
    return parser


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    """The command line, ``exec``'s command being everything after its first ``--``: the
    options before it are the CLI's wherever they stand (``exec ID --timeout-s 5 -- CMD``),
    and nothing after it is (argparse alone would take them as the command's, or refuse)."""
    argv = list(argv)
    command = None
    if argv[:1] == ["exec"] and "--" in argv:
        cut = argv.index("--")
        argv, command = argv[:cut], argv[cut + 1 :]
    args = _parser().parse_args(argv)
    if command is not None:
        args.command_argv = [*args.command_argv, *command]
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    return asyncio.run(_run(_COMMANDS[args.command], args))


async def _run(command: Command, args: argparse.Namespace) -> int:
    owner = getattr(args, "owner", None) if args.command == "create" else None
    try:
        async with AsyncSandman(
            args.url,
            args.token,
            owner=owner or _default_owner(),
            lease_s=None,
            release_on_exit=False,
        ) as client:
            return await command(client, args)
    except SandmanError as e:
        print(f"error: {e.reason}: {e.message}", file=sys.stderr)
        return 1
    except ValueError as e:  # e.g. no URL configured
        print(f"error: invalid_configuration: {e}", file=sys.stderr)
        return 2
