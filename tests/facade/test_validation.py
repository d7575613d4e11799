"""Every parameter of the facade's own operations is validated, against a real facade.

Each numeric parameter must be a finite number in its documented range, or the answer is a
400 ``invalid_<name>`` at once (a NaN timeout used to park the request forever, past the
maximum wait); owners are label values wherever they appear; ``SANDMAN_*`` environment names
are reserved; a ``continue`` token is one the facade issued; an Idempotency-Key names one
request, a batch's count included. The generated-input tests draw the parameters' text
freely and check the one rule: accepted exactly when the wire model accepts it.
"""

from __future__ import annotations

import math
import re
import time
from typing import Any
from urllib.parse import quote

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from facade.app import FacadeSettings
from facade.index import IndexSettings
from sandman.wire.facade import MAX_PAGE, MAX_WAIT_S
from tests.support.facade import LiveFacade
from tests.support.kube import FAST

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]
IMAGE = "registry.example/tasks/demo:1"
FUZZ = settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


@pytest.fixture
def facade_settings() -> FacadeSettings:
    """A wait on an unknown id gives up at once: the generated waits stay short."""
    return FacadeSettings(port=0, client=FAST, index=IndexSettings(unknown_grace_s=0.05))


async def _call(live: LiveFacade, method: str, path: str, **kwargs: Any) -> tuple[int, Any]:
    async with live.http.request(method, path, **kwargs) as r:
        body = await r.read()
        return r.status, msgspec.json.decode(body) if body else None


def _reason(body: Any) -> str:
    return str(body["error"]["reason"])


async def _create(live: LiveFacade, owner: str = "run-1", **spec: Any) -> str:
    status, body = await _call(
        live, "POST", "/v1/sandboxes", json={"image": IMAGE, "owner": owner, **spec}
    )
    assert status == 201, body
    return str(body["id"])


@pytest.mark.parametrize("value", ["nan", "NaN", "inf", "-inf", "-1", "600.5", "1e9", "x", ""])
async def test_a_wait_timeout_must_be_finite_and_in_range(live: LiveFacade, value: str) -> None:
    sid = await _create(live)
    started = time.monotonic()
    status, body = await _call(
        live, "GET", f"/v1/sandboxes/{sid}", params={"wait": "ready", "timeout_s": value}
    )
    assert (status, _reason(body)) == (400, "invalid_timeout_s"), body
    assert time.monotonic() - started < 2


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "0", "1001", "1.5", "x", ""])
async def test_a_page_limit_must_be_an_integer_in_range(live: LiveFacade, value: str) -> None:
    status, body = await _call(live, "GET", "/v1/sandboxes", params={"limit": value})
    assert (status, _reason(body)) == (400, "invalid_limit"), body


def _in_range(text: str, low: float, high: float, integer: bool) -> bool:
    try:
        value = float(text)
    except ValueError:
        return False
    return math.isfinite(value) and low <= value <= high and (value.is_integer() or not integer)


async def _wait_answer(live: LiveFacade, text: str) -> tuple[bool, float]:
    """(accepted, seconds) of a wait on an unknown id with ``timeout_s=text``."""
    started = time.monotonic()
    status, body = await _call(
        live, "GET", "/v1/sandboxes/sb-none", params={"wait": "ready", "timeout_s": text}
    )
    assert status == 404 or (status, _reason(body)) == (400, "invalid_timeout_s"), (text, body)
    return status == 404, time.monotonic() - started


async def _limit_answer(live: LiveFacade, text: str) -> bool:
    status, body = await _call(live, "GET", "/v1/sandboxes", params={"limit": text})
    assert status == 200 or (status, _reason(body)) == (400, "invalid_limit"), (text, body)
    return status == 200


NUMBERS = st.one_of(st.floats(), st.integers(-(10**4), 10**4), st.integers()).map(repr)
ODD = st.sampled_from(["nan", "-nan", "+inf", "Infinity", "1e400", "-0", "0x10", " 5", "5 "])


@FUZZ
@given(text=NUMBERS)
async def test_numbers_are_accepted_exactly_when_finite_and_in_range(
    live: LiveFacade, text: str
) -> None:
    accepted, took = await _wait_answer(live, text)
    assert accepted == _in_range(text, 0, MAX_WAIT_S, integer=False), text
    assert took < 2, (text, took)
    assert await _limit_answer(live, text) == _in_range(text, 1, MAX_PAGE, integer=True), text


@FUZZ
@given(text=st.one_of(ODD, st.text(max_size=12)))
async def test_any_text_is_a_number_in_range_or_a_400(live: LiveFacade, text: str) -> None:
    accepted, took = await _wait_answer(live, text)
    assert took < 2, (text, took)
    assert not accepted or _in_range(text, 0, MAX_WAIT_S, integer=False), text
    if await _limit_answer(live, text):
        assert _in_range(text, 1, MAX_PAGE, integer=True), text


# --- owners -------------------------------------------------------------------------------
BAD_OWNERS = ["", "a b", "x,sandman.io/tenant=t1", "-lead", "trail-", "a\n", "é", "o" * 64]


@pytest.mark.parametrize("owner", BAD_OWNERS)
async def test_an_owner_is_a_label_value_everywhere(live: LiveFacade, owner: str) -> None:
    status, body = await _call(live, "DELETE", "/v1/sandboxes", params={"owner": owner})
    assert (status, _reason(body)) == (400, "invalid_owner"), body
    status, body = await _call(live, "GET", "/v1/sandboxes", params={"owner": owner})
    assert (status, _reason(body)) == (400, "invalid_owner"), body
    status, body = await _call(live, "POST", "/v1/sandboxes", json={"image": IMAGE, "owner": owner})
    assert (status, _reason(body)) == (400, "invalid_owner"), body
    if owner and "/" not in owner and "\n" not in owner:  # a path segment at all
        status, body = await _call(
            live, "PUT", f"/v1/owners/{quote(owner)}/lease", json={"duration_s": 30}
        )
        assert (status, _reason(body)) == (400, "invalid_owner"), body


async def test_an_owner_is_required_to_release_an_owner(live: LiveFacade) -> None:
    status, body = await _call(live, "DELETE", "/v1/sandboxes")
    assert (status, _reason(body)) == (400, "owner_required"), body


@FUZZ
@given(owner=st.text(max_size=70))
async def test_owners_are_accepted_exactly_when_label_values(live: LiveFacade, owner: str) -> None:
    valid = bool(owner) and re.fullmatch(r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?", owner)
    status, body = await _call(live, "DELETE", "/v1/sandboxes", params={"owner": owner})
    assert status == (202 if valid else 400), (owner, body)
    if not valid:
        assert _reason(body) == "invalid_owner"


# --- environment, labels, bodies ----------------------------------------------------------
@pytest.mark.parametrize("name", ["SANDMAN_LOG_LEVEL", "SANDMAN_TOKEN", "SANDMAN_", "1X", "A=B"])
async def test_reserved_and_invalid_env_names_are_refused(live: LiveFacade, name: str) -> None:
    spec = {"image": IMAGE, "owner": "run-1", "env": {name: "bogus"}}
    status, body = await _call(live, "POST", "/v1/sandboxes", json=spec)
    assert (status, _reason(body)) == (400, "invalid_env"), body
    status, body = await _call(live, "POST", "/v1/batches", json={"spec": spec, "count": 1})
    assert (status, _reason(body)) == (400, "invalid_env"), body


@FUZZ
@given(suffix=st.from_regex(r"[A-Za-z0-9_.-]{0,20}", fullmatch=True))
async def test_the_whole_sandman_prefix_is_reserved(live: LiveFacade, suffix: str) -> None:
    spec = {"image": IMAGE, "owner": "run-1", "env": {f"SANDMAN_{suffix}": "1"}}
    status, body = await _call(live, "POST", "/v1/sandboxes", json=spec)
    assert (status, _reason(body)) == (400, "invalid_env"), body


async def test_integral_floats_are_integers(live: LiveFacade) -> None:
    spec = {"image": IMAGE, "owner": "run-1", "ttl_s": 60.0, "idle_timeout_s": 3e2}
    status, body = await _call(live, "POST", "/v1/sandboxes", json=spec)
    assert status == 201, body
    status, body = await _call(live, "PUT", "/v1/owners/run-1/lease", json={"duration_s": 30.0})
    assert status == 200, body
    status, body = await _call(live, "POST", "/v1/sandboxes", json={**spec, "ttl_s": 60.5})
    assert (status, _reason(body)) == (400, "invalid_request"), body


@pytest.mark.parametrize("path", ["/v1/owners/run-1/lease", "/v1/sandboxes", "/v1/batches"])
async def test_a_json_body_is_required(live: LiveFacade, path: str) -> None:
    method = "PUT" if "lease" in path else "POST"
    status, body = await _call(live, method, path)
    assert (status, _reason(body)) == (400, "invalid_request"), body


async def test_unknown_query_parameters_are_refused(live: LiveFacade) -> None:
    status, body = await _call(live, "GET", "/v1/sandboxes", params={"wiat": "ready"})
    assert (status, _reason(body)) == (400, "unknown_parameter"), body
    status, body = await _call(live, "GET", "/v1/classes", params={"x": "1"})
    assert (status, _reason(body)) == (400, "unknown_parameter"), body


@pytest.mark.parametrize("label", ["novalue", "=v", "k=v=w", "k=v v", "k w=v", ""])
async def test_a_label_filter_is_k_equals_v(live: LiveFacade, label: str) -> None:
    status, body = await _call(live, "GET", "/v1/sandboxes", params={"label": label})
    assert (status, _reason(body)) == (400, "invalid_label"), body


async def test_a_405_says_what_is_allowed(live: LiveFacade) -> None:
    async with live.http.request("TRACE", "/v1/sandboxes") as r:
        assert r.status == 405
        assert set(r.headers["Allow"].replace(" ", "").split(",")) == {
            "DELETE",
            "GET",
            "HEAD",
            "POST",
        }
        assert (await r.json())["error"]["reason"] == "method_not_allowed"


# --- continue tokens and idempotency keys -------------------------------------------------
async def test_a_listing_continues_only_from_issued_tokens(live: LiveFacade) -> None:
    for _ in range(3):
        await _create(live, owner="pages")
    status, page = await _call(
        live, "GET", "/v1/sandboxes", params={"owner": "pages", "limit": "2"}
    )
    assert status == 200 and len(page["items"]) == 2 and page["continue"]
    params = {"owner": "pages", "limit": "2", "continue": page["continue"]}
    status, rest = await _call(live, "GET", "/v1/sandboxes", params=params)
    assert status == 200 and len(rest["items"]) == 1 and rest["continue"] is None
    for token in ["zzzz", "YWJj", page["continue"] + "A", page["continue"][:-1], "=", "~"]:
        status, body = await _call(
            live, "GET", "/v1/sandboxes", params={**params, "continue": token}
        )
        assert (status, _reason(body)) == (400, "invalid_continue"), (token, body)


@FUZZ
@given(token=st.text(min_size=1, max_size=40))
async def test_a_made_up_continue_token_is_refused(live: LiveFacade, token: str) -> None:
    status, body = await _call(live, "GET", "/v1/sandboxes", params={"continue": token})
    assert (status, _reason(body)) == (400, "invalid_continue"), (token, body)


@pytest.mark.parametrize("counts", [(2, 3), (3, 2)])
async def test_a_batch_key_reused_with_another_count_is_refused(
    live: LiveFacade, counts: tuple[int, int]
) -> None:
    spec = {"image": IMAGE, "owner": f"batch-{counts[0]}"}
    key = {"Idempotency-Key": f"key-{counts[0]}-{counts[1]}"}
    first, second = counts
    status, body = await _call(
        live, "POST", "/v1/batches", json={"spec": spec, "count": first}, headers=key
    )
    assert status == 201 and len(body["sandboxes"]) == first, body
    status, body = await _call(
        live, "POST", "/v1/batches", json={"spec": spec, "count": first}, headers=key
    )
    assert status == 201 and len(body["sandboxes"]) == first, body  # a retry: a replay
    status, body = await _call(
        live, "POST", "/v1/batches", json={"spec": spec, "count": second}, headers=key
    )
    assert (status, _reason(body)) == (409, "idempotency_key_reused"), body
    status, listed = await _call(live, "GET", "/v1/sandboxes", params={"owner": spec["owner"]})
    assert len(listed["items"]) == first


@pytest.mark.parametrize("key", ["", " ", "k" * 256, "caf\u00e9", "a\tb"])
async def test_an_idempotency_key_is_printable_ascii(live: LiveFacade, key: str) -> None:
    headers = {"Idempotency-Key": key.encode().decode("latin-1")}
    status, body = await _call(
        live, "POST", "/v1/sandboxes", json={"image": IMAGE, "owner": "k"}, headers=headers
    )
    assert (status, _reason(body)) == (400, "invalid_idempotency_key"), body
