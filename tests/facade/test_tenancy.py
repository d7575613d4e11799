"""Tenants, admission and per-sandbox tokens (deterministic: the clock is a fake one)."""

from __future__ import annotations

import copy
import hashlib
import re
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest

from daemon.sandbox.layout import token_digest
from facade.podspec import DaemonDelivery, SandboxClass, render_pod
from facade.tenancy import TenancyError, TenantDirectory
from facade.tokens import TokenMinter
from kube.ratelimit import TokenBucket
from sandman.wire.facade import CreateSandbox


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
    salt = minter.new_salt()
    token = minter.token_for("ns", "sb-1", salt)
    assert token == TokenMinter(b"s" * 32).token_for("ns", "sb-1", salt)
    assert token != minter.token_for("ns", "sb-2", salt)
    assert token != TokenMinter(b"t" * 32).token_for("ns", "sb-1", salt)
    # The same name re-created draws another salt: the old token drives nothing after it.
    assert minter.new_salt() != salt
    assert token != minter.token_for("ns", "sb-1", minter.new_salt())
    assert token != minter.token_for("ns", "sb-1", "")  # nor a pod from before salts


def test_the_token_of_a_pod_is_the_one_its_verifier_was_made_from() -> None:
    """What the proxy derives from a pod (its sandbox label, namespace, salt annotation)
    matches the verifier the create path put in it, for the original and its replacement."""
    minter = TokenMinter(b"s" * 32)
    salt = minter.new_salt()
    pod = render_pod(
        CreateSandbox(image="busybox", owner="run-1"),
        SandboxClass(name="tiny"),
        DaemonDelivery("local-process", python=("python3",)),
        name="sb-1",
        namespace="ns",
        tenant="t",
        token=minter.token_for("ns", "sb-1", salt),
        token_salt=salt,
        now=datetime.now(UTC),
    )
    (container,) = pod["spec"]["containers"]
    verifier = next(e["value"] for e in container["env"] if e["name"] == "SANDMAN_TOKEN_SHA256")
    assert token_digest(minter.token_of(pod)).hex() == verifier
    replacement = copy.deepcopy(pod)
    replacement["metadata"]["name"] = "sb-1-r1"
    assert minter.token_of(replacement) == minter.token_of(pod)
    with pytest.raises(ValueError, match="at least 32 bytes"):
        TokenMinter(b"short")


def _tenant(name: str, namespace: str | None = None, **more: object) -> str:
    ns = f"\n    namespace: {namespace}" if namespace else ""
    extra = "".join(f"\n    {k}: {v}" for k, v in more.items())
    return f"  - name: {name}{ns}\n    token_sha256: [{_digest(name)}]{extra}\n"


@pytest.mark.parametrize(
    ("tenants", "says"),
    [
        (_tenant("a", "shared") + _tenant("b", "shared"), "namespace 'shared'"),
        (_tenant("a") + _tenant("b", "sandman-a"), "namespace 'sandman-a'"),
        (_tenant("a") + _tenant("a", "other"), "name 'a'"),
        (_tenant("a", "Not_A_Label"), "DNS label"),
        (_tenant("a b"), "label value"),
        (_tenant("a", create_rate_per_s=".nan"), "finite"),
        (_tenant("a", create_rate_per_s=".inf"), "finite"),
        (_tenant("a", max_sandboxes=".inf"), "tenants[0]"),
    ],
)
def test_tenants_sharing_a_namespace_or_with_odd_limits_are_refused(
    tenants: str, says: str
) -> None:
    with pytest.raises(TenancyError, match=re.escape(says)):
        TenantDirectory.from_yaml("tenants:\n" + tenants)


def test_the_facade_refuses_such_a_config_at_start_with_exit_code_2(tmp_path: Path) -> None:
    config = tmp_path / "facade.yaml"
    config.write_text(
        f"secret: {'s' * 40}\ndelivery: {{mode: local-process}}\ntenants:\n"
        + _tenant("a", "shared")
        + _tenant("b", "shared")
    )
    done = subprocess.run(
        [sys.executable, "-m", "facade", "--config", str(config), "--port", "0"],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert done.returncode == 2, done
    assert "namespace 'shared'" in done.stderr and "Traceback" not in done.stderr
