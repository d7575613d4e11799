"""What a generator produces, and the two ways it lands in a file.

A generated Python module is written whole, then put through ruff (import order, then the
formatter) with the project's own configuration, so the file reads like the rest of the tree
and passes the same gates; ruff's output is deterministic, which is what lets a test compare
the committed file with a fresh rendering. A generated part of a hand-written document (a
table in a guide) sits between two marker comments naming its generator, and only that region
is replaced.
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

__all__ = ["ROOT", "Output", "header", "python_module", "replace_region"]

ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Output:
    """One generated file: where it lives (relative to the checkout) and how it is written."""

    path: Path
    render: Callable[[], str]

    @property
    def file(self) -> Path:
        return ROOT / self.path

    def write(self, text: str) -> None:
        self.file.parent.mkdir(parents=True, exist_ok=True)
        self.file.write_text(text)


def header(source: str) -> str:
    """The first line of every generated module: what made it and how to make it again."""
    return f"# Generated from {source} by `make generate` (codegen): do not edit.\n"


def python_module(path: Path, source: str) -> str:
    """``source`` with its imports sorted and formatted as the tree's ruff config says."""
    fixed = _ruff("check", "--fix", "--select", "I", "--quiet", path=path, source=source)
    return _ruff("format", "--quiet", path=path, source=fixed)


def _ruff(*args: str, path: Path, source: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "ruff", *args, "--stdin-filename", str(ROOT / path), "-"],
        input=source,
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"ruff {args[0]} on generated {path}: {done.stderr}\n{source}")
    return done.stdout


def _markers(name: str) -> tuple[str, str]:
    return (
        f"<!-- generated: {name} (make generate); edits here are overwritten -->",
        f"<!-- end of generated: {name} -->",
    )


def replace_region(text: str, name: str, body: str) -> str:
    """``text`` with the region ``name`` (between its markers) holding ``body``."""
    begin, end = _markers(name)
    pattern = re.compile(re.escape(begin) + r"\n.*?" + re.escape(end), re.DOTALL)
    if len(pattern.findall(text)) != 1:
        raise ValueError(f"expected one region {name!r} in the file, between\n{begin}\n{end}")
    return pattern.sub(lambda _: f"{begin}\n{body.rstrip()}\n{end}", text)
