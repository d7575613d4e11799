"""The layers contract covers the whole tree: every package of every distribution is in it.

import-linter checks only the modules a contract names, so a new package left out of the
``layers`` list would be free to import upwards unnoticed. This test walks the source tree
and fails on any module no layer holds (the ``sandman`` package's face — ``__init__`` and
``__main__``, which only hand names on — and ``daemon/__init__``, which holds the two daemon
packages and nothing else, excepted).
"""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FACES = {"sandman", "sandman.__main__", "daemon"}


def _layers() -> list[str]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    (contract,) = [c for c in config["contracts"] if c["type"] == "layers"]
    return [m.strip() for layer in contract["layers"] for m in layer.split("|")]


def _modules() -> set[str]:
    found = set()
    for base in (ROOT, ROOT / "sdk"):
        for path in base.glob("*/**/*.py"):
            rel = path.relative_to(base)
            if rel.parts[0] in {"tests", "sdk", "devtools", "build", "docs", "manifests"}:
                continue
            if rel.parts[0].startswith("."):
                continue
            parts = rel.with_suffix("").parts
            found.add(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return found


def test_every_module_of_the_tree_is_in_a_layer() -> None:
    modules, layers = _modules(), _layers()
    # The walk finds the tree (an empty walk would pass vacuously).
    assert {"facade.service", "sandman.wire.daemon", "simcluster.apiserver.core"} <= modules
    covered = {m for m in modules if any(m == L or m.startswith(L + ".") for L in layers)}
    assert modules - covered - FACES == set()


def test_every_root_package_of_the_contracts_is_layered() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    tops = {m.split(".")[0] for m in _layers()}
    assert set(config["root_packages"]) == tops


def test_the_daemon_face_holds_nothing() -> None:
    """``daemon`` is split across two layers (the agent above kube, the sandbox daemon below
    it): its ``__init__`` may hold no code, or it would sit in no layer at all."""
    source = (ROOT / "daemon" / "__init__.py").read_text()
    code = [ln for ln in source.splitlines() if ln.strip() and not ln.startswith(('"""', "#"))]
    assert all(not ln.startswith(("import ", "from ", "def ", "class ")) for ln in code)
