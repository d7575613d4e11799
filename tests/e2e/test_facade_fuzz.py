"""Generated requests against a real facade, from its own OpenAPI document (schemathesis).

The document is built from the route table and the wire models (``facade.routes``), and the
stack is the real one on loopback (simcluster with virtual nodes, the controller, two facade
processes). Schemathesis draws valid and invalid requests for every operation — bodies,
query strings, path parameters, headers, undeclared methods — and checks each answer: no
5xx, a documented status, a body matching the documented schema, a 405 with ``Allow``, a 401
without credentials, invalid data rejected, and valid data accepted.

"Valid data accepted" has five documented exceptions no schema can state (docs/facade.md):
four depend on the server's configuration or on what it issued before — a class that is not
configured (``unknown_class``), a batch over the tenant's burst (``batch_too_large``), an
announcement over the tenant's preparation caps (``prepare_too_large``), a ``continue`` token
the facade did not hand out (``invalid_continue``) — and one is uniqueness
by a field, which JSON Schema cannot express: an image named twice in one announcement
(``duplicate_image``). The built-in check is replaced by one that allows exactly those.

The document carries every field of every request model, so new fields are fuzzed as soon as
they exist: ``POST /v1/prepare``'s ``sandboxes`` and ``class`` (announced sandboxes) among
them — an unknown class is ``unknown_class``, counts over the tenant's sandbox limit
``prepare_too_large``, both in the list above; a pool over the limit with live sandboxes is a
429, a documented status.

Bounded for CI: a fixed number of examples per operation and mode, derandomized under ``CI``
like the rest of the suite, waits capped at a fraction of a second (how long a wait takes is
not what is fuzzed; that the parameter is validated is).

One test item per operation and mode, each with its own id: schemathesis's ``parametrize()``
gives every operation the same node id, and pytest-xdist (``make pytest`` runs two workers)
keeps one item per id, so twelve of the thirteen operations silently did not run there.
"""

from __future__ import annotations

import json
import os
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis import GenerationMode
from schemathesis.config import SchemathesisConfig

from facade.routes import build_document
from tests.support.stack import RunningStack

pytestmark = pytest.mark.timeout(120)
STACK = {
    "profile": "ci",
    "facade_replicas": 1,
    "max_sandboxes": 30,
    "create_burst": 30,
    # schemathesis sends every operation's invalid-credentials case from 127.0.0.1 and
    # expects 401: past the failed-login throttle's burst it would rightly read 429
    # (tests/facade/test_fairness.py holds the throttle; here it must not mask the 401s).
    "facade_args": ("--failed-logins-burst", "1000000"),
}
#: 400 reasons a schema-valid request may still get (see the module docstring).
STATE_DEPENDENT = frozenset(
    {"unknown_class", "batch_too_large", "prepare_too_large", "invalid_continue", "duplicate_image"}
)
MAX_WAIT_S = 0.2

EXAMPLES_PER_MODE = 20  # per operation and mode: 13 operations x 2 modes x 20 calls
CONFIG = SchemathesisConfig.from_dict({"checks": {"positive_data_acceptance": {"enabled": False}}})
SCHEMA = schemathesis.openapi.from_dict(build_document(), config=CONFIG)
OPERATIONS = {op.label: op for op in (r.ok() for r in SCHEMA.get_all_operations())}


def _takes_input(label: str) -> bool:
    """Parameters, a body or credentials: something a negative case can get wrong."""
    raw = OPERATIONS[label].definition.raw
    security = raw.get("security", SCHEMA.raw_schema.get("security"))
    return bool(raw.get("parameters") or raw.get("requestBody") or security)


# (an operation without parameters, body or credentials, e.g. /healthz, has no negative case)
CASES = [
    pytest.param(label, mode, id=f"{label}-{mode.value}")
    for label in sorted(OPERATIONS)
    for mode in GenerationMode
    if mode is GenerationMode.POSITIVE or _takes_input(label)
]


def valid_data_accepted(ctx: Any, response: Any, case: Any) -> None:
    """A schema-valid request is not a 400, except for a state-dependent reason."""
    if case.meta is None or not case.meta.generation.mode.is_positive:
        return
    if response.status_code not in (400, 413):
        return
    try:
        reason = json.loads(response.content)["error"]["reason"]
    except (ValueError, KeyError, TypeError):
        reason = None
    assert reason in STATE_DEPENDENT, f"valid request rejected: {response.content!r}"


@pytest.mark.parametrize(("label", "mode"), CASES)
def test_generated_requests(label: str, mode: GenerationMode, stack: RunningStack) -> None:
    @settings(
        max_examples=EXAMPLES_PER_MODE,
        deadline=None,
        derandomize=bool(os.environ.get("CI")),
        suppress_health_check=list(HealthCheck),
    )
    @given(case=OPERATIONS[label].as_strategy(generation_mode=mode))
    def check(case: Any) -> None:
        if isinstance(case.query, dict) and isinstance(case.query.get("timeout_s"), int | float):
            case.query["timeout_s"] = min(case.query["timeout_s"], MAX_WAIT_S)
        case.call_and_validate(
            base_url=stack.url,
            headers={"Authorization": f"Bearer {stack.token}"},
            additional_checks=[valid_data_accepted],
            timeout=10,
        )

    check()
