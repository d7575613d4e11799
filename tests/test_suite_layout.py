"""The suite's layout rules, checked on its source:

- no test module imports another test module (conftest.py files count as test modules):
  what tests share lives in ``tests/support/`` (builders, harnesses, the waiting helper) and
  is imported as ``tests.support.<module>``; fixtures stay in conftest.py files, which pytest
  finds by itself;
- every folder under tests/ holding Python files is a package, so each test module has one
  unambiguous name (``tests.<folder>.<module>``) and no folder lands on sys.path, where
  tests/kube or tests/scheduler would shadow the packages they test;
- tests/support/ holds no tests and no conftest.py.
"""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent
SUPPORT = "tests.support"


def _modules() -> list[Path]:
    return sorted(p for p in TESTS.rglob("*.py") if "__pycache__" not in p.parts)


def _dotted(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _top_level_names_in_tests() -> set[str]:
    """Names a bare ``import x`` could only mean as a file of tests/ (e.g. conftest, harness):
    module file names under tests/ that are not also a real top-level package or module."""
    names = {p.stem for p in _modules() if p.stem != "__init__"}
    real = {p.name for p in ROOT.iterdir() if (p / "__init__.py").exists()}
    real |= {p.stem for p in ROOT.glob("*.py")} | {"sandman"}
    return names - real


def _imported(path: Path, tree: ast.Module) -> list[tuple[int, str]]:
    """(line, absolute module name) of every import in the file, relative ones resolved, and
    of every ``pytest_plugins`` entry (plugins are imported modules too)."""
    package = _dotted(path) if path.name == "__init__.py" else _dotted(path).rpartition(".")[0]
    out: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                module = ".".join([*base, *([node.module] if node.module else [])])
                names = [f"{module}.{a.name}" for a in node.names] if not node.module else []
                out += [(node.lineno, m) for m in names or [module]]
            else:
                out.append((node.lineno, node.module or ""))
        elif isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "pytest_plugins" for t in node.targets
        ):
            for value in ast.walk(node.value):
                if isinstance(value, ast.Constant) and isinstance(value.value, str):
                    out.append((node.lineno, value.value))
    return out


def _is_test_module(name: str, bare: set[str]) -> bool:
    top = name.split(".")[0]
    if top == "tests":
        return not (name == SUPPORT or name.startswith(SUPPORT + "."))
    return top in bare


def test_no_test_module_imports_another() -> None:
    bare = _top_level_names_in_tests()
    offences = []
    for path in _modules():
        tree = ast.parse(path.read_text(), filename=str(path))
        for line, name in _imported(path, tree):
            if _is_test_module(name, bare):
                offences.append(f"{path.relative_to(ROOT)}:{line} imports {name}")
    assert offences == [], "move what is shared into tests/support/:\n" + "\n".join(offences)


def test_every_test_folder_is_a_package() -> None:
    folders = {p.parent for p in _modules()}
    missing = sorted(str(f.relative_to(ROOT)) for f in folders if not (f / "__init__.py").exists())
    assert missing == [], f"add an __init__.py to: {missing}"


def test_support_holds_no_tests_and_no_fixtures_file() -> None:
    support = TESTS / "support"
    misplaced = sorted(
        p.name
        for p in support.rglob("*.py")
        if p.name.startswith("test_") or p.name == "conftest.py"
    )
    assert misplaced == []


def test_the_rule_catches_what_it_is_for() -> None:
    """The checks above would pass on an empty list too: feed them the forms they must see."""
    bare = {"conftest", "harness", "test_binder"}
    source = (
        "from conftest import FAST\n"
        "import harness\n"
        "from test_binder import bound\n"
        "from tests.facade.test_state import pod\n"
        "from tests.conftest import FIXTURE_PIDS\n"
        "from . import conftest\n"
        "from .test_state import pod\n"
        "pytest_plugins = ['tests.e2e.conftest']\n"
        # allowed:
        "from tests.support.wait import wait_until\n"
        "from tests.support import pods\n"
        "import kube\n"
        "from scheduler import Scheduler\n"
    )
    path = TESTS / "facade" / "test_example.py"
    found = [n for _, n in _imported(path, ast.parse(source)) if _is_test_module(n, bare)]
    assert found == [
        "conftest",
        "harness",
        "test_binder",
        "tests.facade.test_state",
        "tests.conftest",
        "tests.facade.conftest",
        "tests.facade.test_state",
        "tests.e2e.conftest",
    ]
    assert {"kube", "scheduler", "daemon", "sandman"}.isdisjoint(_top_level_names_in_tests())
