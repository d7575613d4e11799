"""What a client may ask the daemon to run, checked before anything is spawned.

``execve`` takes C strings: a NUL byte cannot be part of an argument, a variable or a
directory name, and ``=`` cannot be part of a variable's name. Python raises ``ValueError``
(not ``OSError``) for those deep inside ``subprocess``, where the daemon once turned them
into 500s, into a 200 head followed by a broken body for streamed execs, and, for sessions,
into a leaked pseudo-terminal. Every spawning operation (exec, streamed exec, background
process, session) therefore validates its request here first, so a bad request is a 400
with a reason and nothing has been started, opened or sent when it is refused.
"""

from __future__ import annotations

import base64
import os
from collections.abc import Mapping

from sandman.wire.daemon import Blob
from sandman.wire.errors import Reason

from .errors import DaemonError

__all__ = ["check_cwd", "check_env", "check_shell", "decode_blob", "resolve_argv"]


def _c_string(value: str) -> bool:
    """True if ``value`` can be handed to the kernel: no NUL, encodable as a file name."""
    if "\0" in value:
        return False
    try:
        os.fsencode(value)
    except UnicodeEncodeError:  # a lone surrogate that is not an escaped byte
        return False
    return True


def check_env(env: Mapping[str, str]) -> None:
    for key, value in env.items():
        if not key or "=" in key or not _c_string(key):
            raise DaemonError(
                f"environment variable name {key!r} is empty or holds '=' or NUL",
                reason=Reason.INVALID_ENV,
            )
        if not _c_string(value):
            raise DaemonError(f"NUL byte in the value of {key!r}", reason=Reason.INVALID_ENV)


def check_cwd(cwd: str | None) -> None:
    if cwd is not None and (not cwd or not _c_string(cwd)):
        raise DaemonError("'cwd' is empty or holds a NUL byte", reason=Reason.INVALID_CWD)


def check_shell(shell: str | None) -> None:
    if shell is not None and (not shell or not _c_string(shell)):
        raise DaemonError("'shell' is empty or holds a NUL byte", reason=Reason.INVALID_SHELL)


def resolve_argv(argv: list[str] | None, command: str | None, shell: str) -> list[str]:
    """The argv to spawn: ``argv`` itself or ``[shell, "-c", command]``."""
    if (argv is None) == (command is None):
        raise DaemonError("give exactly one of 'argv' and 'command'", reason=Reason.INVALID_COMMAND)
    if argv is not None:
        if not argv or not argv[0]:
            raise DaemonError("'argv' must name a program", reason=Reason.INVALID_COMMAND)
        if not all(_c_string(a) for a in argv):
            raise DaemonError("NUL byte in 'argv'", reason=Reason.INVALID_COMMAND)
        return argv
    assert command is not None
    if not _c_string(command):
        raise DaemonError("NUL byte in 'command'", reason=Reason.INVALID_COMMAND)
    check_shell(shell)
    return [shell, "-c", command]


def decode_blob(blob: Blob | None) -> bytes | None:
    if blob is None:
        return None
    if blob.encoding == "utf-8":
        return blob.data.encode()
    try:
        return base64.b64decode(blob.data, validate=True)
    except ValueError as exc:  # binascii.Error, or text that is not even ASCII
        raise DaemonError(
            f"stdin is not valid base64: {exc}", reason=Reason.INVALID_BASE64
        ) from exc
