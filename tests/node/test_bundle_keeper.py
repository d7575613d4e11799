"""Keeping the daemon bundle on the node (hostPath delivery): versioned copies, an atomic
``current`` symlink, a refresh when someone altered the copy, old versions pruned, and the
agent process publishing the digest it keeps."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from daemon.node.bundle import BundleError, bundle_digest, sync_bundle


def make_bundle(root: Path, version: str) -> Path:
    (root / "_internal").mkdir(parents=True)
    (root / "sandman-daemon").write_text(f"daemon {version}")
    (root / "sandman-daemon").chmod(0o755)
    (root / "_internal" / "libc.so.6").write_text("libc")
    (root / "_internal" / "ld-linux-x86-64.so.2").symlink_to("libc.so.6")
    return root


def test_a_bundle_is_copied_under_its_digest_and_current_points_at_it(tmp_path: Path) -> None:
    source, root = make_bundle(tmp_path / "src", "1"), tmp_path / "hostpath"
    digest, copied = sync_bundle(source, root, keep=3)
    assert copied and os.readlink(root / "current") == digest
    assert bundle_digest(root / "current") == bundle_digest(source)
    assert (root / "current" / "_internal" / "ld-linux-x86-64.so.2").is_symlink()
    assert os.access(root / "current" / "sandman-daemon", os.X_OK)
    assert sync_bundle(source, root, keep=3) == (digest, False)  # nothing to do


def test_an_altered_copy_is_replaced(tmp_path: Path) -> None:
    source, root = make_bundle(tmp_path / "src", "1"), tmp_path / "hostpath"
    digest, _ = sync_bundle(source, root, keep=3)
    (root / digest / "sandman-daemon").write_text("tampered")
    assert sync_bundle(source, root, keep=3) == (digest, True)
    assert (root / "current" / "sandman-daemon").read_text() == "daemon 1"


def test_a_new_version_leaves_old_ones_for_running_pods_up_to_keep(tmp_path: Path) -> None:
    root = tmp_path / "hostpath"
    digests = []
    for v in range(4):
        digest, _ = sync_bundle(make_bundle(tmp_path / f"src{v}", str(v)), root, keep=2)
        digests.append(digest)
        os.utime(root / digest, (1000 + v, 1000 + v))  # mtime order = version order
    left = sorted(p.name for p in root.iterdir() if p.is_dir() and not p.is_symlink())
    assert left == sorted(digests[-2:])
    assert os.readlink(root / "current") == digests[-1]


def test_a_missing_source_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(BundleError, match="not a directory"):
        sync_bundle(tmp_path / "nope", tmp_path / "hostpath", keep=1)
