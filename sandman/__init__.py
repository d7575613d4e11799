"""Sandman's public surface: the trainer SDK (sync and async) and the ``sandman`` CLI.

``from sandman import AsyncSandman`` (or ``Sandman`` for blocking code); see
docs/trainer-guide.md. The SDK lives in :mod:`sandman.sdk`; every public name is here too.
"""

from .sdk import *  # noqa: F403
from .sdk import __all__ as _sdk_all

__version__ = "0.1.0"

__all__ = ["__version__", *_sdk_all]
