"""Every command's flags default to its settings dataclass: one definition, held here.

The start-queue cap once read 20 in the placement library, 5 in the controller's flags and 20
again in the burst benchmark's help. Parsing an empty command line must give exactly the
settings object a library user gets by default, so a default changed in one place is changed
everywhere (or this fails).
"""

from __future__ import annotations

import argparse
import os
from dataclasses import fields, replace
from pathlib import Path

import pytest

from controller.__main__ import parse_settings as controller_settings
from controller.app import ControllerSettings
from controller.leader import ElectionSettings
from daemon.sandbox.__main__ import parse_settings as daemon_settings
from daemon.sandbox.settings import DaemonSettings
from facade.__main__ import parse_settings as facade_settings
from facade.app import FacadeSettings
from kube.ratelimit import PacerSettings
from load.burst.cli import add_arguments as burst_arguments
from load.burst.settings import BurstSettings, Thresholds
from scheduler import SchedulerSettings


def test_controller_flags_default_to_controller_settings() -> None:
    settings, _ = controller_settings(["--no-leader-elect"])
    assert settings == ControllerSettings()
    assert settings.scheduler.max_starting_per_node == SchedulerSettings().max_starting_per_node


def test_controller_election_flags_default_to_election_settings() -> None:
    settings, _ = controller_settings(["--identity", "me"])
    assert settings.election == ElectionSettings(identity="me")


def test_facade_flags_default_to_facade_settings() -> None:
    settings, config, _ = facade_settings(["--config", "f.yaml"])
    assert (settings, config) == (FacadeSettings(), "f.yaml")


def test_daemon_flags_default_to_daemon_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in [k for k in os.environ if k.startswith("SANDMAN_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("SANDMAN_TOKEN", "t")
    assert daemon_settings([]) == DaemonSettings(token="t")


def test_burst_flags_default_to_burst_settings() -> None:
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


def test_no_pacer_fixes_the_client_rate_and_nothing_else() -> None:
    controller, _ = controller_settings(["--no-leader-elect", "--no-pacer"])
    facade, _, _ = facade_settings(["--config", "f.yaml", "--no-pacer"])
    assert not controller.client.pacer.enabled and not facade.client.pacer.enabled
    fixed = replace(ControllerSettings().client, pacer=PacerSettings(enabled=False))
    assert controller == replace(ControllerSettings(), client=fixed)
    fixed = replace(FacadeSettings().client, pacer=PacerSettings(enabled=False))
    assert facade == replace(FacadeSettings(), client=fixed)


def test_leader_wait_sets_the_placement_wait_and_nothing_else() -> None:
    facade, _, _ = facade_settings(["--config", "f.yaml", "--leader-wait-s", "12.5"])
    placement = replace(FacadeSettings().placement, leader_wait_s=12.5)
    assert facade == replace(FacadeSettings(), placement=placement)
    with pytest.raises(SystemExit) as refused:
        facade_settings(["--config", "f.yaml", "--leader-wait-s", "-1"])
    assert refused.value.code == 2
