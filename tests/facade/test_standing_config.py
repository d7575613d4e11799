"""Standing pools in the facade configuration: a good entry is read as written, and every bad
one stops the facade with a ConfigError naming the tenant and the pool entry."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from facade.config import ConfigError, load_config
from facade.tenancy import StandingPool

_TOKEN_SHA = "ab" * 32
_LIMIT = 100


def _write(directory: Path, pools: Any, **tenant: Any) -> Path:
    (directory / "secret").write_text("s" * 48)
    document = {
        "secret_file": "secret",
        "delivery": {"mode": "local-process"},
        "classes": [{"name": "tiny"}, {"name": "big", "cpu": "2"}],
        "tenants": [
            {
                "name": "team-a",
                "token_sha256": [_TOKEN_SHA],
                "max_sandboxes": _LIMIT,
                "pools": pools,
                **tenant,
            }
        ],
    }
    path = directory / "facade.yaml"
    path.write_text(yaml.safe_dump(document))
    return path


def test_pools_are_read_as_written(tmp_path: Path) -> None:
    pools = [
        {"image": "reg.example/swe:1", "class": "tiny", "min": 5, "max": 20},
        {"image": "reg.example/swe:1", "class": "big", "min": 2},
        {"image": "python:3.12-slim", "min": 0, "max": 3},
    ]
    config = load_config(_write(tmp_path, pools))
    (tenant,) = config.tenants.tenants()
    assert tenant.pools == (
        StandingPool("reg.example/swe:1", "tiny", 5, 20),
        StandingPool("reg.example/swe:1", "big", 2, _LIMIT),
        StandingPool("python:3.12-slim", "tiny", 0, 3),
    )


@pytest.mark.parametrize(
    ("pools", "tenant", "message"),
    [
        ({"image": "a"}, {}, r"pools must be a list"),
        (["a:1"], {}, r"pools\[0\]: must be a mapping"),
        ([{"image": "a:1", "min": 1, "size": 3}], {}, r"pools\[0\]: unknown keys \['size'\]"),
        ([{"image": "has space", "min": 1}], {}, r"pools\[0\]: image is not an image reference"),
        ([{"min": 1}], {}, r"pools\[0\]: image is not an image reference"),
        ([{"image": "a:1", "class": "huge", "min": 1}], {}, r"pools\[0\] .*no class 'huge'"),
        ([{"image": "a:1", "class": "big", "min": 1}], {"allowed_classes": ["tiny"]}, "may"),
        ([{"image": "a:1", "min": 1}], {"allowed_registries": ["reg.example"]}, "registry"),
        ([{"image": "a:1"}], {}, r"pools\[0\] \(a:1\): min is required"),
        ([{"image": "a:1", "min": 4, "max": 3}], {}, r"0 <= min <= max"),
        ([{"image": "a:1", "min": -1}], {}, r"0 <= min <= max"),
        ([{"image": "a:1", "min": 0, "max": 0}], {}, r"max >= 1"),
        ([{"image": "a:1", "min": 1.5}], {}, "whole numbers"),
        ([{"image": "a:1", "min": True}], {}, "whole numbers"),
        ([{"image": "a:1", "min": 1, "max": _LIMIT + 1}], {}, "exceeds the tenant's max_sand"),
        ([{"image": "a:1", "min": 1}, {"image": "a:1", "min": 2}], {}, r"already pools\[0\]"),
        ([{"image": "a:1", "min": 60}, {"image": "b:1", "min": 60}], {}, "add up to 120"),
    ],
)
def test_bad_pool_is_a_config_error_naming_the_entry(
    tmp_path: Path, pools: Any, tenant: dict[str, Any], message: str
) -> None:
    with pytest.raises(ConfigError, match=message) as caught:
        load_config(_write(tmp_path, pools, **tenant))
    assert "team-a" in str(caught.value) or "tenants[0]" in str(caught.value)


_counts = st.one_of(st.none(), st.integers(-2, _LIMIT + 2), st.sampled_from([True, 1.5, "3"]))
_entries = st.fixed_dictionaries(
    {},
    optional={
        "image": st.sampled_from(["reg.example/a:1", "b:2", "no pe", "", None, 7]),
        "class": st.sampled_from(["tiny", "big", "huge", "", 3]),
        "min": _counts,
        "max": _counts,
        "extra": st.just(1),
    },
)


def _acceptable(entries: list[dict[str, Any]]) -> bool:
    """The rule, written independently of the parser: what a valid list of pools is."""
    seen: set[tuple[str, str]] = set()
    reserve = 0
    for e in entries:
        image, cls = e.get("image"), e.get("class", "tiny")
        lo, hi = e.get("min"), e.get("max")
        if set(e) - {"image", "class", "min", "max"}:
            return False
        if not isinstance(image, str) or not image or any(c <= " " or c > "~" for c in image):
            return False
        if cls not in ("tiny", "big"):
            return False
        if type(lo) is not int or (hi is not None and type(hi) is not int):
            return False
        most = _LIMIT if hi is None else hi
        if not (0 <= lo <= most and 1 <= most <= _LIMIT) or (image, cls) in seen:
            return False
        seen.add((image, cls))
        reserve += lo
    return reserve <= _LIMIT


@settings(max_examples=300, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(_entries, max_size=3))
def test_generated_pools_load_exactly_when_valid(
    tmp_path: Path, entries: list[dict[str, Any]]
) -> None:
    """Any generated list of pools: it loads exactly when the rule above accepts it, a
    loaded one is the entries as written, and a refused one is a ConfigError (never a
    traceback of another kind) naming the tenant."""
    path = _write(tmp_path, entries)
    if _acceptable(entries):
        (tenant,) = load_config(path).tenants.tenants()
        assert [(p.image, p.sandbox_class, p.min, p.max) for p in tenant.pools] == [
            (e["image"], e.get("class", "tiny"), e["min"], e.get("max") or _LIMIT) for e in entries
        ]
    else:
        with pytest.raises(ConfigError, match=r"team-a|tenants\[0\]"):
            load_config(path)
