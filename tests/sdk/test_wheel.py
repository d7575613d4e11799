"""The trainer's install: the SDK wheel holds ``sandman`` only and pulls in nothing of the server.

A trainer runs ``pip install sandman`` inside a training environment that already holds
PyTorch, JAX and whatever else; every extra package or top-level module there is a conflict
waiting to happen (``daemon`` is also python-daemon's import name). So the wheel is built for
real, installed with its declared dependencies into a fresh virtual environment, and used from
there with the checkout nowhere on ``sys.path``.
"""

from __future__ import annotations

import email.parser
import json
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

import sandman

ROOT = Path(__file__).resolve().parents[2]
#: What the SDK needs, and nothing else: the facade connection and tool calls (aiohttp), the
#: blocking twin's portal (anyio), the wire models (msgspec).
REQUIREMENTS = {"aiohttp>=3.10", "anyio>=4.4", "msgspec>=0.18"}
#: The agent harnesses (sandman.integrations), each only with its extra.
EXTRAS = {"mini-swe-agent": "mini-swe-agent<3,>=2.0", "swe-rex": "swe-rex<2,>=1.4"}
#: Importable in the dev environment, and must not be in the trainer's.
SERVER_AND_DEV_MODULES = [
    "kube", "controller", "facade", "scheduler", "daemon", "simcluster", "devstack", "load",
    "codegen",
    "kr8s", "kubernetes", "prometheus_client", "yaml", "h11", "cryptography",
]  # fmt: skip

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

_PROBE = """
import importlib.util, json, sys
import sandman
from sandman import AsyncSandman, Sandman, SandmanError
import sandman.cli, sandman.wire.facade, sandman.wire.daemon
import sandman.integrations.mini_swe_agent, sandman.integrations.swerex  # without the harnesses
print(json.dumps({
    "file": sandman.__file__,
    "all": sorted(sandman.__all__),
    "present": [m for m in sys.argv[1:] if importlib.util.find_spec(m) is not None],
}))
"""


def _run(*argv: str | Path, cwd: Path) -> str:
    done = subprocess.run([str(a) for a in argv], cwd=cwd, capture_output=True, text=True)
    assert done.returncode == 0, f"{argv}: {done.stdout}\n{done.stderr}"
    return done.stdout


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    # From a copy: an in-tree build leaves build/ and *.egg-info in the checkout.
    skip = shutil.ignore_patterns("build", "*.egg-info", "__pycache__")
    source = shutil.copytree(ROOT / "sdk", out / "sdk", ignore=skip)
    _run(sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", source, "-w", out, cwd=out)
    (built,) = out.glob("sandman-*.whl")
    return built


def test_the_wheel_holds_the_sandman_package_only(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    tops = {name.split("/")[0] for name in names}
    assert tops == {"sandman", f"sandman-{sandman.__version__}.dist-info"}
    assert "sandman/py.typed" in names
    assert "sandman/wire/daemon.py" in names and "sandman/sdk/blocking/client.py" in names
    # What the generators wrote is in the wheel; the generators are not.
    assert "sandman/sdk/create_options.py" in names
    assert not any("codegen" in name for name in names)


def test_the_wheel_declares_only_what_the_sdk_uses(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as zf:
        meta_name = next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))
        meta = email.parser.Parser().parsestr(zf.read(meta_name).decode())
        points = next(n for n in zf.namelist() if n.endswith(".dist-info/entry_points.txt"))
        entry_points = zf.read(points).decode()
    assert meta["Name"] == "sandman"
    requires = set(meta.get_all("Requires-Dist") or [])
    assert {r for r in requires if "extra ==" not in r} == REQUIREMENTS
    assert {r for r in requires if "extra ==" in r} == {
        f'{requirement}; extra == "{extra}"' for extra, requirement in EXTRAS.items()
    }
    assert set(meta.get_all("Provides-Extra") or []) == set(EXTRAS)
    assert "sandman = sandman.cli:main" in entry_points
    assert entry_points.count("=") == 1, entry_points


def test_a_fresh_environment_gets_the_sdk_and_no_server(wheel: Path, tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    _run(sys.executable, "-m", "venv", "--without-pip", venv, cwd=tmp_path)
    python = venv / "bin" / "python"
    _run(sys.executable, "-m", "pip", "--python", python, "install", "-q", wheel, cwd=tmp_path)
    probe = json.loads(_run(python, "-I", "-c", _PROBE, *SERVER_AND_DEV_MODULES, cwd=tmp_path))
    assert Path(probe["file"]).is_relative_to(venv), probe["file"]
    assert {"AsyncSandman", "Sandman", "Timeouts", "__version__"} <= set(probe["all"])
    assert probe["present"] == []
    help_text = _run(venv / "bin" / "sandman", "--help", cwd=tmp_path)
    assert all(command in help_text for command in ("create", "exec", "ls", "rm"))
    freeze = _run(sys.executable, "-m", "pip", "--python", python, "freeze", cwd=tmp_path)
    installed = {line.split("==")[0].lower() for line in freeze.splitlines()}
    assert installed.isdisjoint({"kr8s", "kubernetes", "prometheus-client", "pyyaml", "h11"})


def test_the_daemon_imports_the_wire_models_without_the_sdks_http_client(tmp_path: Path) -> None:
    """``sandman/__init__`` loads the SDK on first use: the daemon (PID 1 of every sandbox)
    imports ``sandman.wire`` and must not pay for aiohttp at every start."""
    probe = (
        "import sys, daemon.sandbox.server; print(sorted({'aiohttp', 'anyio'} & set(sys.modules)))"
    )
    assert _run(sys.executable, "-c", probe, cwd=tmp_path).strip() == "[]"
