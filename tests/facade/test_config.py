"""The facade configuration file: the delivery section given inline or as its own file
(manifests/components swap that file to change the daemon delivery)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from facade.config import ConfigError, load_config

_TOKEN_SHA = "ab" * 32
LOCAL = {"mode": "local-process"}


def _write(tmp_path: Path, **extra: object) -> Path:
    (tmp_path / "secret").write_text("s" * 48)
    document = {
        "secret_file": "secret",
        "classes": [{"name": "tiny"}],
        "tenants": [{"name": "a", "token_sha256": [_TOKEN_SHA]}],
        **extra,
    }
    path = tmp_path / "facade.yaml"
    path.write_text(yaml.safe_dump(document))
    return path


def test_delivery_from_its_own_file(tmp_path: Path) -> None:
    (tmp_path / "delivery.yaml").write_text("mode: host-path\nhost_path: /var/lib/b/current\n")
    config = load_config(_write(tmp_path, delivery_file="delivery.yaml"))
    assert (config.delivery.mode, config.delivery.host_path) == ("host-path", "/var/lib/b/current")


def test_delivery_inline_still_works(tmp_path: Path) -> None:
    inline = {"mode": "init-container", "bundle_image": "r.example/b:1"}
    config = load_config(_write(tmp_path, delivery=inline))
    assert config.delivery.bundle_image == "r.example/b:1"


@pytest.mark.parametrize(
    ("extra", "delivery_text", "message"),
    [
        ({"delivery": {"mode": "host-path"}}, "mode: host-path\n", "both"),
        ({}, None, "cannot read delivery_file"),
        ({}, "[1, 2]\n", "must hold a mapping"),
        ({}, "mode: [unclosed\n", "cannot read delivery_file"),
        ({}, "mode: init-container\n", "needs delivery.bundle_image"),
    ],
)
def test_bad_delivery_file_is_a_config_error(
    tmp_path: Path, extra: dict[str, object], delivery_text: str | None, message: str
) -> None:
    if delivery_text is not None:
        (tmp_path / "delivery.yaml").write_text(delivery_text)
    with pytest.raises(ConfigError, match=message):
        load_config(_write(tmp_path, delivery_file="delivery.yaml", **extra))


def test_class_hardening_settings(tmp_path: Path) -> None:
    classes = [
        {"name": "tiny"},
        {"name": "build", "capabilities": ["CHOWN", "SETUID"], "user_namespace": False},
    ]
    config = load_config(_write(tmp_path, classes=classes, delivery=LOCAL))
    tiny, build = config.classes["tiny"], config.classes["build"]
    assert (tiny.user_namespace, tiny.capabilities) == (True, ())
    assert (build.user_namespace, build.capabilities) == (False, ("CHOWN", "SETUID"))


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ({"capabilities": ["NET_RAW"]}, r"classes\[0\]: capabilities NET_RAW not allowed"),
        ({"capabilities": ["SYS_ADMIN", "CHOWN"]}, "capabilities SYS_ADMIN not allowed"),
        ({"capabilities": "CHOWN"}, "capabilities must be a list"),
        ({"user_namespace": "no"}, "user_namespace must be true or false"),
    ],
)
def test_class_hardening_beyond_baseline_is_a_config_error(
    tmp_path: Path, entry: dict[str, object], message: str
) -> None:
    """A class may add back only what Pod Security `baseline` allows: anything else could
    run only in a `privileged` namespace, so the facade refuses to start with it."""
    with pytest.raises(ConfigError, match=message):
        load_config(_write(tmp_path, classes=[{"name": "c", **entry}], delivery=LOCAL))
