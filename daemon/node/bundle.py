"""Keeping the sandbox daemon's bundle on the node, for the hostPath delivery mode.

With ``host-path`` delivery (facade/podspec.py, docs/daemon-bundle.md), sandbox pods mount
a directory of the node read-only at ``/sandman`` instead of copying the bundle in an init
container. The agent owns that directory: it copies the bundle from its own image (or any
path, ``--bundle-source``) into ``<root>/<digest>/`` and points ``<root>/current`` at it.

Why versioned directories and a symlink: a running daemon maps files of its bundle lazily
(shared libraries, Python modules), so the files under a live pod must never change. A new
version goes into a new directory (copied to a temporary name, then renamed: a half-copied
bundle is never visible), and ``current`` is replaced atomically (a new symlink renamed over
the old). A hostPath volume resolves the symlink when the pod starts, so running pods keep
their version and new pods get the new one. The last ``keep`` versions stay (pods started
from an older one are long gone by then; a sandbox lives hours, an agent upgrade is rare).

Refresh: the digest of ``current`` is checked every ``bundle_check_interval_s``; a missing
or altered version (someone cleaned the node) is copied again.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

__all__ = ["BundleError", "bundle_digest", "sync_bundle"]

CURRENT = "current"


class BundleError(Exception):
    """The bundle could not be copied (source missing, disk full...)."""


def bundle_digest(root: Path) -> str:
    """sha256 over every file's relative path, mode and content, and every symlink's target:
    equal trees, equal digests (16 hex digits are plenty to tell versions apart)."""
    h = hashlib.sha256()
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root).as_posix()
        if path.is_symlink():
            h.update(f"L {rel} {os.readlink(path)}\n".encode())
        elif path.is_file():
            h.update(f"F {rel} {path.stat().st_mode & 0o777:o}\n".encode())
            with path.open("rb") as f:
                for block in iter(lambda: f.read(1 << 20), b""):
                    h.update(block)
        elif path.is_dir():
            h.update(f"D {rel}\n".encode())
    return h.hexdigest()[:16]


def sync_bundle(source: Path, root: Path, keep: int) -> tuple[str, bool]:
    """Make ``<root>/current`` a verified copy of ``source``; (digest, whether it copied)."""
    if not source.is_dir():
        raise BundleError(f"bundle source {source} is not a directory")
    digest = bundle_digest(source)
    root.mkdir(parents=True, exist_ok=True)
    target = root / digest
    copied = False
    if not target.is_dir() or bundle_digest(target) != digest:
        tmp = root / f".tmp-{digest}-{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        try:
            shutil.copytree(source, tmp, symlinks=True)
            if target.exists():
                shutil.rmtree(target)
            tmp.rename(target)
        except OSError as e:
            shutil.rmtree(tmp, ignore_errors=True)
            raise BundleError(f"copying the bundle to {target} failed: {e}") from e
        copied = True
    current = root / CURRENT
    if not current.is_symlink() or os.readlink(current) != digest:
        link = root / f".current-{os.getpid()}"
        link.unlink(missing_ok=True)
        link.symlink_to(digest)
        link.replace(current)
    _prune(root, digest, keep)
    return digest, copied


def _prune(root: Path, current: str, keep: int) -> None:
    """Keep the ``keep`` most recent versions (the current one always)."""
    versions = [p for p in root.iterdir() if p.is_dir() and not p.is_symlink()]
    versions = [p for p in versions if not p.name.startswith(".")]
    versions.sort(key=lambda p: p.stat().st_mtime, reverse=True)
    kept = 1
    for path in versions:
        if path.name == current:
            continue
        if kept < keep:
            kept += 1
            continue
        shutil.rmtree(path, ignore_errors=True)
