"""SWE-ReX on Sandman: ``SandmanDeployment`` (an ``AbstractDeployment``) and
``SandmanRuntime`` (an ``AbstractRuntime``), for ``pip install 'sandman[swe-rex]'``.

Both classes subclass SWE-ReX's, so they exist only with SWE-ReX installed: they are loaded
on first use (``from sandman.integrations.swerex import SandmanDeployment``), and without
SWE-ReX that import raises :class:`sandman.integrations.HarnessMissing` naming the extra,
while ``import sandman.integrations.swerex`` itself always works.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from sandman.integrations import require

if TYPE_CHECKING:
    from .deployment import SandmanDeployment, SandmanDeploymentConfig
    from .runtime import InteractiveCommandsUnsupported, SandmanRuntime

__all__ = [
    "InteractiveCommandsUnsupported",
    "SandmanDeployment",
    "SandmanDeploymentConfig",
    "SandmanRuntime",
]

_HOME = {
    "SandmanDeployment": "deployment",
    "SandmanDeploymentConfig": "deployment",
    "SandmanRuntime": "runtime",
    "InteractiveCommandsUnsupported": "runtime",
}


def __getattr__(name: str) -> Any:
    if name not in _HOME:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    require("swerex.runtime.abstract", extra="swe-rex", integration=__name__)
    value = getattr(importlib.import_module(f"{__name__}.{_HOME[name]}"), name)
    globals()[name] = value
    return value
