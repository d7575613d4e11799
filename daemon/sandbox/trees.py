"""Directory trees without recursion: make, remove and walk at any depth.

``os.makedirs``, ``shutil.rmtree``, ``os.walk`` and ``TarFile.add`` recurse once per level,
so a tree deeper than Python's recursion limit (2,000 levels fit in PATH_MAX, and an agent's
shell can make deeper ones) made the daemon answer 500 ``RecursionError``. These use explicit
stacks, never follow symbolic links, and raise ``OSError`` as the calls they replace.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator

__all__ = ["make_dirs", "remove_tree", "walk_tree"]


def make_dirs(path: str) -> None:
    """``os.makedirs(path, exist_ok=True)``, at any depth."""
    missing = []
    head = path
    while head and not os.path.isdir(head):
        missing.append(head)
        parent = os.path.dirname(head)
        if parent == head:
            break
        head = parent
    for directory in reversed(missing):
        try:
            os.mkdir(directory)
        except FileExistsError:
            if not os.path.isdir(directory):
                raise


def remove_tree(path: str) -> None:
    """``shutil.rmtree(path)``, at any depth; a link is removed, never followed."""
    stack = [(path, False)]
    while stack:
        current, emptied = stack.pop()
        if emptied:
            os.rmdir(current)
            continue
        if not stat.S_ISDIR(os.lstat(current).st_mode):
            os.unlink(current)
            continue
        stack.append((current, True))
        with os.scandir(current) as entries:
            stack.extend((entry.path, False) for entry in entries)


def walk_tree(top: str) -> Iterator[tuple[str, str, os.stat_result]]:
    """(path, path relative to ``top``, lstat) of ``top`` and everything under it, parents
    first, staying on ``top``'s file system (``tar --one-file-system``); entries that vanish
    or cannot be read are skipped."""
    try:
        root = os.lstat(top)
    except OSError:
        return
    yield top, "", root
    if not stat.S_ISDIR(root.st_mode):
        return
    stack = [(top, "")]
    while stack:
        directory, rel = stack.pop()
        try:
            with os.scandir(directory) as entries:
                found = sorted((e.name, e.path) for e in entries)
        except OSError:
            continue
        for name, path in found:
            try:
                st = os.lstat(path)
            except OSError:
                continue
            child_rel = f"{rel}/{name}" if rel else name
            yield path, child_rel, st
            if stat.S_ISDIR(st.st_mode) and st.st_dev == root.st_dev:
                stack.append((path, child_rel))
