"""What a task image can still do with each capability set: ``python -m load.bench.capabilities``.

Why measure instead of trusting a list: the sandbox pod drops every capability
(facade/podspec.py) and a class may add some back (docs/operator-guide.md, "Pod hardening").
Which of the operations unmodified task images run in their set-up steps break under which
set is a property of the kernel and of the tools (apt's privilege drop, su's setgroups), so
this runs each operation for real, as root, under bubblewrap with exactly that set and
``no_new_privs`` (what ``allowPrivilegeEscalation: false`` sets), in a fresh network
namespace, with the host's filesystem read-only and a tmpfs ``/tmp``; and prints which
succeeded. Needs root (as the image's root in a sandbox is) and bwrap.

In a pod with ``hostUsers: false`` the same capabilities are held in the pod's user
namespace only: they act on files and processes whose owners are mapped into it, never on
the node's. What succeeds here succeeds there on the image's own files.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

#: capability sets: restricted, what the guide suggests for build classes, the runtime default
SETS: dict[str, tuple[str, ...]] = {
    "none (restricted)": (),
    "NET_BIND_SERVICE": ("NET_BIND_SERVICE",),
    "build: CHOWN DAC_OVERRIDE FOWNER FSETID SETUID SETGID": (
        "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "SETUID", "SETGID",
    ),
    "containerd default (14, NET_RAW included)": (
        "CHOWN", "DAC_OVERRIDE", "FSETID", "FOWNER", "MKNOD", "NET_RAW", "SETGID", "SETUID",
        "SETFCAP", "SETPCAP", "NET_BIND_SERVICE", "SYS_CHROOT", "KILL", "AUDIT_WRITE",
    ),
}  # fmt: skip

_APT = (
    "apt-get -qq -o Dir::Etc::SourceList={w}/sources.list -o Dir::Etc::SourceParts=/dev/null "
    "-o Dir::State::Lists={w}/lists -o Dir::Cache=/tmp/cache -o Debug::NoLocking=1"
)
#: (name, shell command); {w} is the bound work directory, {wheel} a wheel to install
OPERATIONS: tuple[tuple[str, str], ...] = (
    ("pip install (as root, into a root-owned dir)",
     "{py} -m pip -q install --no-index --no-deps --target /tmp/t {wheel}"),
    ("apt-get update (apt drops to _apt)", _APT + " update"),
    ("apt-get update, APT::Sandbox::User=root", _APT + " -o APT::Sandbox::User=root update"),
    ("chown a file to another user (build step)", "touch /tmp/f && chown 1000:1000 /tmp/f"),
    ("write a file another user owns (0644)", "echo y >> {w}/theirs"),
    ("su to another user", "su -s /bin/sh nobody -c true"),
    ("bind port 80", "{py} -c \"import socket; socket.socket().bind(('127.0.0.1', 80))\""),
    ("raw ICMP socket (ping)",
     "{py} -c 'import socket; socket.socket(socket.AF_INET, socket.SOCK_RAW, 1)'"),
)  # fmt: skip


def _workdir(base: Path) -> Path:
    (base / "repo").mkdir(parents=True)
    (base / "repo" / "Packages").touch()
    (base / "lists" / "partial").mkdir(parents=True)
    (base / "sources.list").write_text(f"deb [trusted=yes] file:{base}/repo ./\n")
    theirs = base / "theirs"
    theirs.write_text("x\n")
    theirs.chmod(0o644)
    shutil.chown(theirs, 1000, 1000)
    base.chmod(0o755)
    return base


def _wheel(base: Path) -> Path:
    """A wheel of a one-module package, written by hand (no network, no build backend)."""
    path = base / "tiny-1-py3-none-any.whl"
    files = {
        "tiny/__init__.py": "",
        "tiny-1.dist-info/METADATA": "Metadata-Version: 2.1\nName: tiny\nVersion: 1\n",
        "tiny-1.dist-info/WHEEL": "Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = "".join(f"{name},,\n" for name in files) + "tiny-1.dist-info/RECORD,,\n"
    with zipfile.ZipFile(path, "w") as wheel:
        for name, text in {**files, "tiny-1.dist-info/RECORD": record}.items():
            wheel.writestr(name, text)
    return path


def run(work: Path, wheel: Path, caps: tuple[str, ...], command: str) -> bool:
    argv = [
        "bwrap", "--ro-bind", "/", "/", "--tmpfs", "/tmp", "--bind", str(work), str(work),
        "--dev", "/dev", "--proc", "/proc", "--unshare-pid", "--unshare-net",
        "--cap-drop", "ALL", *(a for c in caps for a in ("--cap-add", f"CAP_{c}")),
        "--", "sh", "-c", command.format(w=work, wheel=wheel, py=sys.executable),
    ]  # fmt: skip
    done = subprocess.run(argv, capture_output=True, timeout=120)
    return done.returncode == 0


def main(argv: list[str] | None = None) -> int:
    argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args(argv)
    if shutil.which("bwrap") is None or os.geteuid() != 0:
        print("needs bwrap, and root (the image's root is what is measured)", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="capbench-") as tmp:
        base = Path(tmp)
        base.chmod(0o755)
        names = list(SETS)
        print("| operation | " + " | ".join(names) + " |")
        print("|---" * (len(names) + 1) + "|")
        for i, (op, command) in enumerate(OPERATIONS):
            cells = []
            for j, name in enumerate(names):
                work = _workdir(base / f"{i}-{j}")  # fresh: one run's changes never leak
                ok = run(work, _wheel(work), SETS[name], command)
                cells.append("ok" if ok else "**fails**")
            print(f"| {op} | " + " | ".join(cells) + " |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
