"""API Priority and Fairness model, /metrics and API-level fault injection, seen by real
clients: 429 with Retry-After for the over-budget flow only, request counters by user."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
from kubernetes import client, config
from kubernetes.client.rest import ApiException

from simcluster.apiserver import ServerSettings, service_account_user
from simcluster.embedded import EmbeddedCluster
from tests.support.kubectl import admin_http
from tests.support.wait import wait_until

FLOW = {
    "levels": {"sandman": {"mutating": {"rate": 5, "burst": 5}, "max_queue_wait_s": 0.0}},
    "schemas": [{"name": "sandman", "level": "sandman", "service_accounts": ["t/sandman"]}],
}


def pod(name: str) -> dict:
    return {"metadata": {"name": name}, "spec": {"containers": [{"name": "c", "image": "i:1"}]}}


def test_429_retry_after_only_for_the_limited_flow(tmp_path: Path) -> None:
    with EmbeddedCluster(ServerSettings(flowcontrol=FLOW)) as cluster:
        assert cluster.server is not None
        with config.new_client_from_config(config_file=str(cluster.kubeconfig)) as admin:
            client.CoreV1Api(admin).create_namespace({"metadata": {"name": "t"}})
        sa_kubeconfig = cluster.server.kubeconfig(
            tmp_path / "sa", service_account_user("t", "sandman")
        )
        cfg = client.Configuration()
        config.load_kube_config(config_file=str(sa_kubeconfig), client_configuration=cfg)
        cfg.retries = 0  # urllib3 would otherwise honour Retry-After and retry by itself
        with client.ApiClient(cfg) as sa:
            v1 = client.CoreV1Api(sa)
            codes = []
            retry_after = None
            reasons: set[str] = set()
            for i in range(12):
                try:
                    v1.create_namespaced_pod("t", pod(f"p{i}"))
                    codes.append(201)
                except ApiException as e:
                    codes.append(e.status)
                    retry_after = e.headers["Retry-After"]
                    reasons.add(json.loads(e.body)["reason"])
            assert codes[:5] == [201] * 5
            assert 429 in codes
            assert reasons == {"TooManyRequests"}
            assert retry_after is not None
            assert int(retry_after) >= 1
            # reads have their own budget, and other users' writes are not limited
            assert len(v1.list_namespaced_pod("t").items) == codes.count(201)
        with config.new_client_from_config(config_file=str(cluster.kubeconfig)) as admin:
            for i in range(12):
                client.CoreV1Api(admin).create_namespaced_pod("t", pod(f"admin{i}"))
        certs = cluster.server.certs
        assert certs is not None
        token = _token(cluster.kubeconfig)
        metrics = httpx.get(
            f"{cluster.server.url}/metrics",
            headers={"Authorization": f"Bearer {token}"},
            verify=certs.client_context(),
        ).text
        sa_user = "system:serviceaccount:t:sandman"
        pods = 'resource="pods",subresource=""'
        assert (
            f'apiserver_request_total{{code="429",{pods},user="{sa_user}",verb="create"}}'
            in metrics
        )
        assert (
            f'apiserver_request_total{{code="201",{pods},user="admin",verb="create"}} 12.0'
            in metrics
        )
        assert (
            'apiserver_flowcontrol_rejected_requests_total{flow_schema="sandman",priority_level="sandman"}'
            in metrics
        )


def _token(kubeconfig: Path) -> str:
    import yaml

    return str(yaml.safe_load(kubeconfig.read_text())["users"][0]["user"]["token"])


def test_admin_faults_error_rate_and_forced_410() -> None:
    with EmbeddedCluster() as cluster:
        assert cluster.server is not None
        certs = cluster.server.certs
        assert certs is not None
        h = {"Authorization": f"Bearer {_token(cluster.kubeconfig)}"}
        with httpx.Client(
            base_url=cluster.server.url, headers=h, verify=certs.client_context()
        ) as http:
            assert (
                http.post(
                    "/admin/faults",
                    json={"kind": "api-errors", "verb": "list", "rate": 1.0, "code": 500},
                ).status_code
                == 200
            )
            r = http.get("/api/v1/namespaces")
            assert r.status_code == 500
            assert r.json()["reason"] == "InternalError"
            assert (
                http.get("/api/v1/namespaces/default").status_code == 200
            )  # other verbs unaffected
            http.post("/admin/faults", json={"kind": "clear"})
            rv = http.get("/api/v1/namespaces").json()["metadata"]["resourceVersion"]
            http.post("/admin/faults", json={"kind": "expire-watches"})
            lines = http.get(
                "/api/v1/namespaces", params={"watch": "1", "resourceVersion": rv}
            ).text.splitlines()
            assert json.loads(lines[0])["object"]["code"] == 410
            bad = http.post("/admin/faults", json={"kind": "nope"})
            assert bad.status_code == 400


def test_abandoned_watch_is_released() -> None:
    with EmbeddedCluster() as cluster:
        assert cluster.server is not None
        store = cluster.server.store
        before = len(store.all_watchers())
        with (
            admin_http(cluster.kubeconfig) as http,
            http.stream("GET", "/api/v1/pods", params={"watch": "1"}) as r,
        ):
            assert r.status_code == 200
            wait_until(lambda: len(store.all_watchers()) > before, timeout_s=5)
        # the client hung up: the server lets go
        wait_until(lambda: len(store.all_watchers()) == before, timeout_s=5)
