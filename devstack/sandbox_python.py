"""The Python a process-runtime sandbox runs the daemon with, staged outside the checkout.

Why: simcluster's process runtime shows a sandbox only an allow-list of the host
(simcluster/kubelet/bwrap.py): ``/usr``, a small ``/etc``, its volumes — never ``/root``,
``/home`` or the checkout. The ``local-process`` delivery runs the daemon from a Python
installation, and this stack's is a virtualenv inside the checkout, often over an
interpreter in ``/root`` (pyenv). Binding those into every sandbox would hand the agent the
checkout and the home directory again. So the stack stages a virtual environment of its
own in its work directory: what the daemon imports (its packages and their dependencies,
found by importing every ``daemon.sandbox`` module in a fresh interpreter) copied from this
installation, over the system's Python of the same version (in ``/usr``, which every
sandbox sees). Every pod gets the staged environment read-only at :data:`SANDBOX_PREFIX`
through the process runtime's binds (``process.binds`` of the simcluster profile).

Only where the host has no system Python of this version does the interpreter's own
installation get bound, at its own path (a pyenv tree under ``/root``, say): then that
directory, and nothing else of ``/root``, is visible (docs/simcluster.md says so).
"""

from __future__ import annotations

import compileall
import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "SANDBOX_EXECUTABLE",
    "SANDBOX_PREFIX",
    "SandboxPython",
    "host_interpreter",
    "stage_daemon_python",
]

#: Where a sandbox sees the staged environment.
SANDBOX_PREFIX = "/opt/sandman/python"
#: The staged environment's interpreter, as a sandbox runs it (the delivery's ``python``).
SANDBOX_EXECUTABLE = f"{SANDBOX_PREFIX}/bin/python3"

_VERSION = f"python{sys.version_info.major}.{sys.version_info.minor}"

# Run in a fresh interpreter of this installation: every module the daemon may import, then
# the top-level packages that come from outside the standard library, with their paths.
_CLOSURE = """
import importlib, json, pkgutil, sys, sysconfig
import daemon.sandbox
for info in pkgutil.walk_packages(daemon.sandbox.__path__, "daemon.sandbox."):
    importlib.import_module(info.name)
stdlib = {sysconfig.get_path("stdlib"), sysconfig.get_path("platstdlib")}
out = {}
for name, module in list(sys.modules.items()):
    top = name.partition(".")[0]
    where = getattr(sys.modules.get(top), "__file__", None)
    if top in out or where is None or top.startswith(("__editable__", "_distutils_hack")):
        continue
    if any(where.startswith(s + "/") for s in stdlib) and "-packages/" not in where:
        continue
    out[top] = where
print(json.dumps(out))
"""


@dataclass(frozen=True, slots=True)
class SandboxPython:
    """A Python a sandbox can run: its path there, and the binds that make it exist."""

    executable: str
    #: ``(path in the sandbox, host path)``, read-only (``ProcessSettings.binds``).
    binds: tuple[tuple[str, str], ...] = ()

    def profile_override(self) -> str:
        """The simcluster ``--set`` that binds it into every pod of the process runtime."""
        return "process.binds=" + json.dumps(dict(self.binds))


def host_interpreter() -> SandboxPython:
    """This Python's version as a sandbox sees it: the system's (``/usr``, always bound) if
    the host has one, else this installation's own, bound at its own path."""
    real = os.path.realpath(os.path.join(sys.base_prefix, "bin", _VERSION))
    for candidate in (real, f"/usr/bin/{_VERSION}", f"/usr/local/bin/{_VERSION}"):
        if candidate.startswith("/usr/") and os.access(candidate, os.X_OK):
            return SandboxPython(candidate)
    return SandboxPython(real, ((sys.base_prefix, sys.base_prefix),))


def _closure(python: str) -> dict[str, str]:
    out = subprocess.run(
        [python, "-c", _CLOSURE], capture_output=True, text=True, check=True, cwd="/"
    )
    return dict(json.loads(out.stdout))


def stage_daemon_python(dest: Path, python: str = sys.executable) -> SandboxPython:
    """Stage the daemon's virtual environment in ``dest`` (replaced if there) from the
    installation of ``python``; what a sandbox runs it by."""
    interpreter = host_interpreter()
    shutil.rmtree(dest, ignore_errors=True)
    site = dest / "lib" / _VERSION / "site-packages"
    site.mkdir(parents=True)
    for top, where in sorted(_closure(python).items()):
        source = Path(where)
        if source.name == "__init__.py":
            shutil.copytree(source.parent, site / top, ignore=shutil.ignore_patterns("*.pyc"))
        else:
            shutil.copy2(source, site / source.name)
    # The staged tree is read-only in a sandbox: compile it now, or every start would.
    compileall.compile_dir(site, quiet=2, workers=1)
    home = os.path.dirname(interpreter.executable)
    (dest / "pyvenv.cfg").write_text(
        f"home = {home}\ninclude-system-site-packages = false\n"
        f"version = {'.'.join(map(str, sys.version_info[:3]))}\n"
    )
    (dest / "bin").mkdir()
    for name in ("python3", _VERSION):
        (dest / "bin" / name).symlink_to(interpreter.executable)
    return SandboxPython(SANDBOX_EXECUTABLE, (*interpreter.binds, (SANDBOX_PREFIX, str(dest))))
