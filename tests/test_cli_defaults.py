"""Every process's command line is generated from its settings definition: held here.

The start-queue cap once read 20 in the placement library, 5 in the controller's flags and 20
again in the burst benchmark's help; flags were named apart from their fields, and one flag
set a second field. Now the flags, environment names and docs tables are generated from the
fields (:mod:`sandman.base.settings`), so these tests hold the generation, not copies: an
empty command line gives exactly the default object of each process, any settings object
comes back from the command line it prints, every field is a flag (or says why not), and a
bad value is refused with argparse's message, never a traceback.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from controller.__main__ import parse_settings as controller_settings
from controller.app import ControllerSettings
from daemon.node.__main__ import parse_settings as agent_settings
from daemon.node.settings import AgentSettings
from daemon.sandbox.__main__ import parse_settings as daemon_settings
from daemon.sandbox.settings import DaemonSettings
from facade.__main__ import parse_settings as facade_settings
from facade.app import FacadeSettings
from load.burst.cli import add_arguments as burst_arguments
from load.burst.settings import BurstSettings, Thresholds
from sandman.base.settings import KEY, MISSING, Spec, default_of, options, setting, unit_of
from sandman.base.settings_cli import to_argv
from scheduler import SchedulerSettings

TOKEN = {"SANDMAN_TOKEN": "t0ken"}


@dataclass(frozen=True)
class Process:
    """One process's entry point, as its tests call it: argv + environ -> settings."""

    module: str
    cls: type
    parse: Callable[[list[str], dict[str, str]], Any]
    environ: dict[str, str]

    def default(self) -> Any:
        return self.cls(token=TOKEN["SANDMAN_TOKEN"]) if self.cls is DaemonSettings else self.cls()


PROCESSES = [
    Process("controller", ControllerSettings, controller_settings, {}),
    Process("facade", FacadeSettings, lambda a, e: facade_settings(["--config=f", *a], e)[0], {}),
    Process("daemon.sandbox", DaemonSettings, daemon_settings, TOKEN),
    Process("daemon.node", AgentSettings, agent_settings, {}),
]
BY_MODULE = pytest.mark.parametrize("process", PROCESSES, ids=lambda p: p.module)


@BY_MODULE
def test_an_empty_command_line_gives_exactly_the_default_settings(process: Process) -> None:
    assert process.parse([], process.environ) == process.default()


def test_the_facade_takes_its_config_file_besides_its_settings() -> None:
    assert facade_settings(["--config", "f.yaml"], {}) == (FacadeSettings(), "f.yaml")


def _leaves(cls: type, path: tuple[str, ...] = ()) -> tuple[set[tuple[str, ...]], list[str]]:
    """Every field path below ``cls``, walked here without the mechanism: (the settings'
    paths, the fixed fields' reasons)."""
    found: set[tuple[str, ...]] = set()
    reasons: list[str] = []
    for f in fields(cls):
        spec = f.metadata.get(KEY)
        assert isinstance(spec, Spec), f"{cls.__name__}.{f.name} is declared without a spec"
        if spec.kind == "fixed":
            reasons.append(spec.help)
        elif spec.kind == "part":
            assert spec.part is not None
            inner, why = _leaves(spec.part, (*path, f.name))
            found |= inner | ({(*path, f.name)} if spec.optional else set())
            reasons += why
        else:
            found.add((*path, f.name))
    return found, reasons


@BY_MODULE
def test_every_field_is_one_flag_with_help_or_says_why_it_is_not(process: Process) -> None:
    flags = options(process.cls)
    leaves, reasons = _leaves(process.cls)
    assert {o.path for o in flags} == leaves
    assert len({o.flag for o in flags}) == len(flags), "two fields share a flag"
    assert all(len(o.spec.help) > 10 for o in flags)
    assert all(len(why) > 10 for why in reasons)


@BY_MODULE
def test_every_measured_value_names_its_unit(process: Process) -> None:
    """A float is a measurement: its name ends with its unit, or it says it has none."""
    for o in options(process.cls):
        if o.kind == "value" and o.type is float:
            assert o.unit is not None or o.spec.dimensionless, o.flag
        if o.unit is not None:
            assert o.flag.endswith(("-s", "-bytes", "qps")), o.flag


def test_a_float_without_its_unit_is_refused_where_flags_are_generated() -> None:
    @dataclass(frozen=True)
    class Loose:
        timeout: float = setting(1.0, help="a timeout of some unit")

    with pytest.raises(TypeError, match="unit"):
        options(Loose)
    assert (unit_of("timeout_s"), unit_of("max_body_bytes"), unit_of("qps")) == ("s", "bytes", "/s")
    assert (unit_of("min_qps"), unit_of("increase_per_s"), unit_of("tombstones")) == (
        "/s",
        "/s",
        None,
    )


def test_a_field_declared_without_the_mechanism_is_refused() -> None:
    @dataclass(frozen=True)
    class Plain:
        retries: int = 3

    with pytest.raises(TypeError, match="declare it"):
        options(Plain)


def _values(f: dataclasses.Field[Any], spec: Spec, default: Any) -> st.SearchStrategy[Any]:
    """The default or any value of the field's type (valid or not: __post_init__ filters)."""
    text = str(f.type)
    if spec.choices is not None:
        any_value: st.SearchStrategy[Any] = st.sampled_from(spec.choices)
    elif spec.secret:
        any_value = st.text("abcXYZ019-_.", min_size=1, max_size=12)
    elif text.startswith("bool"):
        any_value = st.booleans()
    elif text.startswith("int"):
        any_value = st.integers(0, 10**6)
    elif text.startswith("float"):
        any_value = st.floats(0.001, 1e4, allow_nan=False)
    else:
        any_value = st.text(st.characters(codec="utf-8", exclude_characters="\x00"), max_size=8)
        # Python 3.11's argparse drops a lone "--" even as an attached value: `--run-dir=--`
        # parses to [] (its own bug, not the generated flags'; no setting takes "--").
        any_value = any_value.filter(lambda v: v != "--")
    if "None" in text:
        any_value = st.none() | (any_value.filter(bool) if text.startswith("str") else any_value)
    return any_value if default is MISSING else st.just(default) | any_value


def _valid(cls: type, base: Any, changes: dict[str, Any]) -> Any:
    try:
        return cls(**changes) if base is None else replace(base, **changes)
    except ValueError:
        return None


@functools.cache
def instances(cls: type, defaults: Any = None) -> st.SearchStrategy[Any]:
    """Any valid settings object of ``cls``: each field its default or any value (built
    once per class: a process's settings are a hundred fields)."""
    drawn: dict[str, st.SearchStrategy[Any]] = {}
    for f in fields(cls):
        spec, default = f.metadata[KEY], default_of(f, defaults)
        if spec.kind == "part":
            inner = instances(spec.part, default)
            drawn[f.name] = st.none() | inner if spec.optional else inner
        elif spec.kind == "setting":
            drawn[f.name] = _values(f, spec, default)
    objects = st.fixed_dictionaries(drawn).map(lambda kw: _valid(cls, defaults, kw))
    return objects.filter(lambda made: made is not None)


@BY_MODULE
# Each example is a whole process's settings and a parse of its command line: slow to draw
# on a loaded machine, and most fields keep their default (the filter rejects few).
@settings(
    max_examples=60, suppress_health_check=[HealthCheck.filter_too_much, HealthCheck.too_slow]
)
@given(data=st.data())
def test_any_settings_object_comes_back_from_its_command_line(
    process: Process, data: st.DataObject
) -> None:
    original = data.draw(instances(process.cls))
    environ = {"SANDMAN_TOKEN": original.token} if process.cls is DaemonSettings else {}
    assert process.parse(to_argv(original), environ) == original


@BY_MODULE
def test_a_bad_value_gets_argparse_s_message_and_status_2(process: Process) -> None:
    """Run as the process is: a type error and a range error (a class's __post_init__)."""
    wrong = {
        "controller": ["--gc-qps=fast", "--election-lease-duration-s=1"],
        "facade": ["--client-burst=x", "--placement-leader-wait-s=-1"],
        "daemon.sandbox": ["--max-sessions=1.5", "--idle-timeout-s=0"],
        "daemon.node": ["--pull-parallelism=two", "--pull-parallelism=0"],
    }[process.module]
    for arg in wrong:
        argv = [sys.executable, "-m", process.module, arg]
        if process.module == "facade":
            argv.append("--config=f")
        run = subprocess.run(argv, env=process.environ or None, capture_output=True, text=True)
        assert run.returncode == 2, run.stderr
        assert "error: " in run.stderr and "Traceback" not in run.stderr, run.stderr
        assert run.stderr.startswith("usage: ")


def test_the_environment_sets_what_a_flag_does_not() -> None:
    environ = {**TOKEN, "SANDMAN_IDLE_TIMEOUT_S": "90", "SANDMAN_PORT": "9001"}
    got = daemon_settings(["--port=9002"], environ)
    assert (got.idle_timeout_s, got.port) == (90.0, 9002)  # the flag wins
    assert daemon_settings([], {**TOKEN, "SANDMAN_WORKDIR": ""}).workdir is None
    agent = agent_settings([], {"NODE_NAME": "n1", "POD_NAMESPACE": "ns"})
    # The pod's own namespace is not where the Leases live (kube/preparation_contract.py).
    assert (agent.node_name, agent.namespace) == ("n1", "sandman-nodes")


@pytest.mark.parametrize("wrong", [{"SANDMAN_LOG_LEVEL": "bogus"}, {"SANDMAN_PORT": "x"}])
def test_a_bad_environment_value_is_refused_naming_its_variable(
    wrong: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as refused:
        daemon_settings([], {**TOKEN, **wrong})
    assert refused.value.code == 2
    assert f"error: ${next(iter(wrong))}: invalid" in capsys.readouterr().err


def test_the_token_comes_from_a_file_before_the_environment(tmp_path: Path) -> None:
    secret = tmp_path / "token"
    secret.write_text("from-file\n")
    assert daemon_settings([f"--token-file={secret}"], TOKEN).token == "from-file"
    assert daemon_settings([], {**TOKEN, "SANDMAN_TOKEN_FILE": str(secret)}).token == "from-file"
    with pytest.raises(SystemExit):
        daemon_settings([], {})


def test_the_gc_burst_is_derived_from_its_rate_unless_given() -> None:
    assert controller_settings(["--gc-qps=50"], {}).gc.bucket_burst == 50
    assert controller_settings(["--gc-qps=0.5"], {}).gc.bucket_burst == 1
    assert controller_settings(["--gc-qps=50", "--gc-burst=7"], {}).gc.bucket_burst == 7
    (burst,) = [o for o in options(ControllerSettings) if o.flag == "--gc-burst"]
    assert burst.spec.derived is not None and burst.default is None


def test_an_optional_part_is_switched_off_and_its_flags_need_it_on() -> None:
    off = controller_settings(["--no-prepare", "--no-election"], {})
    assert off == replace(ControllerSettings(), prepare=None, election=None)
    with pytest.raises(SystemExit):
        controller_settings(["--no-election", "--election-identity=a"], {})
    fixed = controller_settings(["--no-client-pacer"], {})
    pacer = replace(ControllerSettings().client.pacer, enabled=False)
    assert fixed == replace(ControllerSettings(), client=replace(fixed.client, pacer=pacer))


def test_a_part_s_defaults_are_its_parent_s() -> None:
    """The facade's client is not ClientSettings(): its flags default to the facade's."""
    (qps,) = [o for o in options(FacadeSettings) if o.flag == "--client-qps"]
    assert qps.default == FacadeSettings().client.qps == 1000.0
    assert facade_settings(["--config=f", "--client-burst=5"], {})[0].client.qps == 1000.0


def test_burst_flags_default_to_burst_settings() -> None:
    """The burst benchmark's own flags (load/burst/cli.py), not generated: held to its
    settings here."""
    parser = argparse.ArgumentParser()
    burst_arguments(parser)
    args = parser.parse_args([])
    d, th = BurstSettings(out=Path(".")), Thresholds()
    flag_of = {"window_s": "window", "ready_timeout_s": "ready_timeout"}
    # Not defaults of their own: the output folder, optional overrides, a mode switch, and a
    # file the CLI reads into classes (no file: no classes, the settings' empty tuple).
    derived = ("out", "nodes", "overrides", "direct", "classes")
    for f in fields(BurstSettings):
        name = flag_of.get(f.name, f.name)
        if hasattr(args, name) and f.name not in derived:
            assert getattr(args, name) == getattr(d, f.name), f.name
    assert (args.min_efficiency, args.max_writes) == (
        th.min_efficiency,
        th.max_writes_per_sandbox,
    )
    (cap_flag,) = [a for a in parser._actions if a.dest == "max_starting_per_node"]
    assert f"its default: {SchedulerSettings().max_starting_per_node})" in str(cap_flag.help)
