"""Tenants, admission and per-sandbox tokens (deterministic: the clock is a fake one)."""

from __future__ import annotations

import hashlib

import pytest

from facade.tenancy import TenancyError, TenantDirectory
from facade.tokens import TokenMinter
from kube.ratelimit import TokenBucket


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


TENANTS = f"""
tenants:
  - name: team-a
    namespace: sandman-a
    token_sha256: [{_digest("tok-a")}]
    max_sandboxes: 100
    create_rate_per_s: 10
    create_burst: 20
  - name: team-b
    token_sha256: [{_digest("tok-b")}]
"""


def test_tokens_map_to_tenants_and_namespaces() -> None:
    directory = TenantDirectory.from_yaml(TENANTS)
    a = directory.authenticate("tok-a")
    b = directory.authenticate("tok-b")
    assert a is not None and (a.name, a.namespace) == ("team-a", "sandman-a")
    assert b is not None and b.namespace == "sandman-team-b"
    assert directory.authenticate("nope") is None


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_admission_rate_quota_and_batch_size() -> None:
    clock = FakeClock()
    directory = TenantDirectory.from_yaml(TENANTS, clock)
    tenant = directory.authenticate("tok-a")
    assert tenant is not None
    assert directory.admit(tenant, 20, live=0).allowed  # the whole burst
    clock.now = 0.1
    limited = directory.admit(tenant, 5, live=20)
    assert (limited.allowed, limited.reason) == (False, "rate_limited")
    assert limited.retry_after_s == pytest.approx(0.4)  # 5 tokens at 10/s, 1 already refilled
    clock.now = 0.6
    assert directory.admit(tenant, 5, live=20).allowed
    clock.now = 10.0
    full = directory.admit(tenant, 1, live=100)
    assert (full.allowed, full.reason) == (False, "quota_exceeded")
    too_big = directory.admit(tenant, 21, live=0)
    assert (too_big.allowed, too_big.reason) == (False, "batch_too_large")


def test_try_take_refills_up_to_burst_and_takes_nothing_when_short() -> None:
    clock = FakeClock()
    bucket = TokenBucket(2.0, 4, clock)
    assert bucket.try_take(4) == 0.0
    assert bucket.try_take(1) == pytest.approx(0.5)
    assert bucket.try_take(1) == pytest.approx(0.5)  # a refusal took nothing
    clock.now = 100.0
    assert bucket.try_take(4) == 0.0  # refilled to the burst, not beyond
    assert bucket.try_take(1) == pytest.approx(0.5)


@pytest.mark.parametrize(
    "text",
    [
        "",
        "tenants: []",
        "tenants: [{name: x}]",
        "tenants: [{name: x, token_sha256: [abc]}]",
        "tenants: [{name: x, token_sha256: ['" + "0" * 64 + "'], max_sandboxes: 0}]",
        "tenants: [{name: x, token_sha256: ['" + "0" * 64 + "']}, "
        "{name: y, token_sha256: ['" + "0" * 64 + "']}]",
        "tenants: {",
    ],
)
def test_invalid_tenant_files_are_rejected_clearly(text: str) -> None:
    with pytest.raises(TenancyError):
        TenantDirectory.from_yaml(text)


def test_tokens_are_derived_deterministically_and_per_sandbox() -> None:
    minter = TokenMinter(b"s" * 32)
    assert minter.token_for("ns", "sb-1") == TokenMinter(b"s" * 32).token_for("ns", "sb-1")
    assert minter.token_for("ns", "sb-1") != minter.token_for("ns", "sb-2")
    assert minter.token_for("ns", "sb-1") != TokenMinter(b"t" * 32).token_for("ns", "sb-1")
    with pytest.raises(ValueError, match="at least 32 bytes"):
        TokenMinter(b"short")
