"""Sandman's trainer SDK (sync and async) and the trainer ``sandman`` CLI.

``from sandman import AsyncSandman`` (or ``Sandman`` for blocking code); see
docs/trainer-guide.md. The SDK lives in :mod:`sandman.sdk` and every public name of it is
here too, loaded on first use: :mod:`sandman.wire` (the wire models both sides of each API
import) is also imported by the sandbox daemon, which must not pay for the SDK's HTTP client
(aiohttp: ~10 MiB and tens of milliseconds at every sandbox start) just to import a model.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .sdk import *  # noqa: F403

__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    if name == "__all__" or not name.startswith("_"):
        import sandman.sdk as sdk  # not `from . import sdk`: that asks this very hook first

        if name == "__all__":
            return ["__version__", *sdk.__all__]
        if name in sdk.__all__:
            value = getattr(sdk, name)
            globals()[name] = value
            return value
    raise AttributeError(f"module 'sandman' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *__getattr__("__all__")})
