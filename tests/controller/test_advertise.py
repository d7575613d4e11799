"""The leader's advertised placement URL must be one a facade can connect to: with election
on, a controller that would advertise an unspecified address (``0.0.0.0``, ``::``) refuses
to start — the facade would otherwise fail every placement call and silently create every
sandbox unbound (issue 24: the production overlay did exactly that)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from controller.app import ControllerSettings

REFUSED = [
    {"health_host": "0.0.0.0"},
    {"health_host": "::"},
    {"health_host": "127.0.0.1", "advertise_url": "http://0.0.0.0:8080"},
    {"advertise_url": "http://[::]:8080"},
    {"advertise_url": "http://:8080"},
]
ACCEPTED = [
    {},
    {"health_host": "0.0.0.0", "advertise_url": "http://10.1.2.3:8080"},
    {"health_host": "0.0.0.0", "advertise_url": "http://$(POD_IP):8080"},  # the kubelet expands
    {"health_host": "0.0.0.0", "advertise_url": "http://controller-0.example:8080"},
    {"health_host": "::1"},
]


@pytest.mark.parametrize("given", REFUSED)
def test_an_unspecified_advertised_address_is_refused(given: dict[str, str]) -> None:
    with pytest.raises(ValueError, match="no facade can connect to"):
        ControllerSettings(**given)  # type: ignore[arg-type]


@pytest.mark.parametrize("given", ACCEPTED)
def test_a_reachable_advertised_address_is_accepted(given: dict[str, str]) -> None:
    ControllerSettings(**given)  # type: ignore[arg-type]


def test_without_election_nothing_is_advertised_so_any_listen_address_is_fine() -> None:
    ControllerSettings(health_host="0.0.0.0", election=None)


def test_the_process_refuses_to_start_and_says_why() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "controller", "--health-host=0.0.0.0", "--health-port=8080"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2, proc.stderr
    assert "advertise_url" in proc.stderr and "0.0.0.0" in proc.stderr
