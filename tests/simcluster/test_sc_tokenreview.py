"""TokenReview (``authentication.k8s.io/v1``), as a server verifying its callers' bearer
tokens uses it (the controller's placement endpoint): the token's user and groups, upstream's
audience check (a token issued for one audience is not valid for another; one issued
without is the API server's), an unknown token unauthenticated with an error, an empty one
a 400 — and creating one is an RBAC-checked verb like any other."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from simcluster.apiserver import ServerSettings
from simcluster.apiserver.auth import API_AUDIENCE
from simcluster.cluster import ClusterSettings
from simcluster.embedded import EmbeddedCluster
from tests.support.kubectl import Kubectl, admin_http

SA = "system:serviceaccount:x:caller"


@pytest.fixture(scope="module")
def cluster() -> Iterator[EmbeddedCluster]:
    with EmbeddedCluster(ClusterSettings(server=ServerSettings(authorization="rbac"))) as c:
        k = Kubectl(c.kubeconfig)
        k.run("create", "namespace", "x")
        k.run("-n", "x", "create", "serviceaccount", "caller")
        yield c


def token(cluster: EmbeddedCluster, *audiences: str) -> str:
    args = [f"--audience={a}" for a in audiences]
    out = Kubectl(cluster.kubeconfig).run("-n", "x", "create", "token", "caller", *args)
    return out.stdout.strip()


def review(http: httpx.Client, spec: dict[str, Any]) -> httpx.Response:
    body = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": spec}
    return http.post("/apis/authentication.k8s.io/v1/tokenreviews", json=body)


def test_a_token_is_reviewed_with_its_user_and_audiences(cluster: EmbeddedCluster) -> None:
    bound = token(cluster, "sandman-placement")
    with admin_http(cluster.kubeconfig) as http:
        r = review(http, {"token": token(cluster)})
        both = review(http, {"token": bound, "audiences": ["sandman-placement", "other"]})
    assert r.status_code == 201, r.text
    status = r.json()["status"]
    assert status["authenticated"] is True
    assert status["user"]["username"] == SA
    assert "system:serviceaccounts:x" in status["user"]["groups"]
    assert status["audiences"] == [API_AUDIENCE]
    assert both.json()["status"]["audiences"] == ["sandman-placement"]


@pytest.mark.parametrize(
    "case", ["unknown token", "wrong audience", "API token for another audience"]
)
def test_what_is_not_valid_is_unauthenticated_with_an_error(
    cluster: EmbeddedCluster, case: str
) -> None:
    spec = {
        "unknown token": {"token": "not-a-token"},
        "wrong audience": {"token": token(cluster, "sandman-placement")},
        "API token for another audience": {"token": token(cluster), "audiences": ["x"]},
    }[case]
    with admin_http(cluster.kubeconfig) as http:
        r = review(http, spec)
    assert r.status_code == 201, r.text
    status = r.json()["status"]
    assert "authenticated" not in status and status["user"] == {}
    assert status["error"]


def test_an_empty_token_is_a_bad_request(cluster: EmbeddedCluster) -> None:
    with admin_http(cluster.kubeconfig) as http:
        r = review(http, {"token": ""})
    assert r.status_code == 400
    assert r.json()["message"] == "token is required for TokenReview in authentication"


def test_creating_a_token_review_needs_rbac(cluster: EmbeddedCluster) -> None:
    k = Kubectl(cluster.kubeconfig)
    can = k.run("auth", "can-i", "create", "tokenreviews", f"--as={SA}", check=False)
    assert can.stdout.strip() == "no"
    with admin_http(cluster.kubeconfig) as caller:
        caller.headers["Authorization"] = f"Bearer {token(cluster)}"
        assert review(caller, {"token": token(cluster)}).status_code == 403
