"""Sandman as the sandbox backend of the agent harnesses trainers already run.

RL trainers do not call a sandbox API: they run a harness (mini-swe-agent, SWE-ReX, ...) and
the harness picks its backend by an import path in its configuration. Each module here is
such a backend, written against the harness's own protocol, so a trainer changes a line of
configuration and nothing else (docs/integrations.md).

A harness is an optional extra of the ``sandman`` distribution (``pip install
'sandman[mini-swe-agent]'``): importing a module here never needs its harness, so the SDK and
its docs tools load everywhere; using one without its harness raises
:class:`HarnessMissing`, which says which extra to install.
"""

from __future__ import annotations

import importlib
from types import ModuleType

__all__ = ["HarnessMissing", "require"]


class HarnessMissing(ImportError):
    """An integration was used without its harness installed."""


def require(module: str, *, extra: str, integration: str) -> ModuleType:
    """Import ``module`` of a harness, or say which extra of ``sandman`` provides it."""
    try:
        return importlib.import_module(module)
    except ImportError as e:
        raise HarnessMissing(
            f"{integration} needs {module!r}, which is not installed: "
            f"pip install 'sandman[{extra}]' ({e})",
            name=module,
        ) from e
