"""The create spec's defaults are written once and every side takes them from there.

``sandman.wire.facade`` defines ``DEFAULT_CLASS`` and ``DEFAULT_TTL_S`` and declares them on
``CreateSandbox``, the one create spec. Here each side that offers a default is held to it:
the wire model (declared and decoded), the pod the facade renders from the spec and its
fallback class list.
The trainer's side no longer holds copies: the SDK's keywords, the ``sandman create`` flags
and the trainer guide's table are read or generated from the Struct, and what reaches the
wire is checked end to end in tests/sdk/test_create_options.py and tests/test_generated.py.
"""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime, timedelta
from pathlib import Path

import msgspec

from facade.config import load_config
from facade.podspec import ANNOTATION_EXPIRES_AT, DaemonDelivery, SandboxClass, render_pod
from sandman.wire.facade import DEFAULT_CLASS, DEFAULT_TTL_S, CreateBatch, CreateSandbox

DEFAULTS = {"sandbox_class": DEFAULT_CLASS, "ttl_s": DEFAULT_TTL_S}


def test_the_wire_model_declares_the_defaults() -> None:
    declared = {f.name: f.default for f in msgspec.structs.fields(CreateSandbox)}
    assert {name: declared[name] for name in DEFAULTS} == DEFAULTS


def test_a_body_without_class_or_ttl_decodes_to_the_defaults() -> None:
    spec = msgspec.json.decode(b'{"image": "img", "owner": "run-1"}', type=CreateSandbox)
    assert (spec.sandbox_class, spec.ttl_s) == (DEFAULT_CLASS, DEFAULT_TTL_S)
    batch = msgspec.json.decode(b'{"spec": {"image": "i", "owner": "o"}, "count": 2}',
                                type=CreateBatch)  # fmt: skip
    assert (batch.spec.sandbox_class, batch.spec.ttl_s) == (DEFAULT_CLASS, DEFAULT_TTL_S)


def test_the_facade_renders_an_unspecified_ttl_from_the_spec() -> None:
    now = datetime(2026, 1, 1, tzinfo=UTC)
    pod = render_pod(
        CreateSandbox(image="img", owner="run-1"),
        SandboxClass(DEFAULT_CLASS),
        DaemonDelivery("host-path"),
        name="sb-1",
        namespace="ns",
        tenant="t",
        token="tok",
        now=now,
    )
    expires = (now + timedelta(seconds=DEFAULT_TTL_S)).strftime("%Y-%m-%dT%H:%M:%SZ")
    assert pod["metadata"]["annotations"][ANNOTATION_EXPIRES_AT] == expires


def test_a_facade_configured_without_classes_offers_the_default_class(tmp_path: Path) -> None:
    digest = hashlib.sha256(b"token").hexdigest()
    config = tmp_path / "facade.yaml"
    config.write_text(
        f'secret: "{"s" * 48}"\n'
        "delivery: {mode: host-path}\n"
        f"tenants: [{{name: team-a, token_sha256: ['{digest}'], max_sandboxes: 10}}]\n"
    )
    assert list(load_config(config).classes) == [DEFAULT_CLASS]
