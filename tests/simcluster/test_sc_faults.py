"""API fault injection (``simcluster.apiserver.faults``): error rates scoped to one user and
a mix of codes, as the fault benchmark injects them (5% 429/500 on Sandman's requests only,
the kubelets and the observer served normally)."""

from __future__ import annotations

from collections import Counter

import pytest

from simcluster.apiserver.faults import ApiFaults
from simcluster.errors import InternalError, TooManyRequests

SANDMAN = "system:serviceaccount:sandman-system:sandman-controller"


def _codes(faults: ApiFaults, verb: str, user: str, n: int = 2000) -> Counter[int]:
    out: Counter[int] = Counter()
    for _ in range(n):
        error = faults.error_for(verb, user)
        out[0 if error is None else error.code] += 1
    return out


def test_a_user_scoped_fault_fails_only_that_users_requests() -> None:
    faults = ApiFaults(seed=3)
    faults.set_error_rate("*", 0.05, (429, 500), user=SANDMAN)
    assert _codes(faults, "create", "system:node:node-1") == Counter({0: 2000})
    sandman = _codes(faults, "create", SANDMAN)
    assert 60 <= sandman[429] + sandman[500] <= 140  # ~5% of 2000
    assert sandman[429] > 20 and sandman[500] > 20  # both codes drawn


def test_the_most_specific_key_wins_and_a_zero_rate_clears_it() -> None:
    faults = ApiFaults(seed=1)
    faults.set_error_rate("*", 1.0, 500)
    faults.set_error_rate("get", 1.0, 429, user=SANDMAN)
    assert isinstance(faults.error_for("get", SANDMAN), TooManyRequests)
    assert isinstance(faults.error_for("list", SANDMAN), InternalError)
    assert isinstance(faults.error_for("get", "admin"), InternalError)
    faults.set_error_rate("get", 0.0, 429, user=SANDMAN)
    assert isinstance(faults.error_for("get", SANDMAN), InternalError)


@pytest.mark.parametrize("code", [200, (429, 404), ()])
def test_only_the_injectable_codes_are_accepted(code: int | tuple[int, ...]) -> None:
    with pytest.raises(ValueError, match="429, 500 or 504"):
        ApiFaults().set_error_rate("*", 0.1, code)
