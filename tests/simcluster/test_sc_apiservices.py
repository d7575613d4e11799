"""apiregistration.k8s.io/v1 APIServices through the official client's typed
``ApiregistrationV1Api`` and the real kubectl: the local APIServices a bare cluster lists,
CRUD with 409 AlreadyExists, the status subresource, upstream's validation, and discovery.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from kubernetes import client, config
from kubernetes.client.rest import ApiException

from simcluster.apiserver.kinds.apiservices import priorities
from simcluster.apiserver.resources import Registry
from simcluster.embedded import EmbeddedCluster
from tests.support.kubectl import Kubectl

METRICS = "v1beta1.metrics.k8s.io"


@pytest.fixture(scope="module")
def cluster() -> Iterator[EmbeddedCluster]:
    with EmbeddedCluster() as c:
        yield c


@pytest.fixture(scope="module")
def api_client(cluster: EmbeddedCluster) -> Iterator[client.ApiClient]:
    with config.new_client_from_config(config_file=str(cluster.kubeconfig)) as c:
        yield c


@pytest.fixture
def api(api_client: client.ApiClient) -> client.ApiregistrationV1Api:
    return client.ApiregistrationV1Api(api_client)


def metrics_service(name: str = METRICS, **spec: object) -> client.V1APIService:
    fields: dict[str, object] = {
        "group": "metrics.k8s.io",
        "version": "v1beta1",
        "group_priority_minimum": 100,
        "version_priority": 100,
        "insecure_skip_tls_verify": True,
        "service": client.ApiregistrationV1ServiceReference(
            namespace="kube-system", name="metrics-server"
        ),
    }
    return client.V1APIService(
        metadata=client.V1ObjectMeta(name=name),
        spec=client.V1APIServiceSpec(**{**fields, **spec}),
    )


def test_a_bare_cluster_lists_local_apiservices(api: client.ApiregistrationV1Api) -> None:
    listed = {s.metadata.name: s for s in api.list_api_service().items}
    table = priorities()
    served = {
        (g, v) for g in Registry.builtin().group_order for v in Registry.builtin().versions(g)
    }
    assert set(listed) == {f"{v}.{g}" for g, v in served if (g, v) in table}
    assert {"v1.", "v1.apps", "v2.autoscaling", "v1.apiextensions.k8s.io"} <= set(listed)
    assert "v1.apiregistration.k8s.io" not in listed  # upstream has no priority for it
    core = listed["v1."]
    assert (core.spec.group, core.spec.version, core.spec.service) == ("", "v1", None)
    assert (core.spec.group_priority_minimum, core.spec.version_priority) == (18000, 1)
    for s in listed.values():
        [available] = s.status.conditions
        assert (available.type, available.status, available.reason) == (
            "Available",
            "True",
            "Local",
        )


def test_apiservice_crud_conflict_and_status(api: client.ApiregistrationV1Api) -> None:
    made = api.create_api_service(metrics_service())
    [cond] = made.status.conditions
    assert (cond.status, cond.reason) == ("False", "ServiceNotFound")
    assert cond.message == 'service/metrics-server in "kube-system" is not present'
    with pytest.raises(ApiException) as err:
        api.create_api_service(metrics_service())
    assert err.value.status == 409
    assert json.loads(err.value.body)["reason"] == "AlreadyExists"
    got = api.read_api_service(METRICS)
    assert got.spec.service.name == "metrics-server" and got.metadata.uid == made.metadata.uid
    assert METRICS in {s.metadata.name for s in api.list_api_service().items}
    [seen] = got.status.conditions
    seen.status, seen.reason, seen.message = "True", "Passed", "all checks passed"
    updated = api.replace_api_service_status(METRICS, got)
    assert updated.status.conditions[0].status == "True"
    updated.spec.version_priority = 50
    updated.status.conditions[0].status = "False"
    replaced = api.replace_api_service(METRICS, updated)  # the main resource keeps the status
    assert replaced.spec.version_priority == 50
    assert replaced.status.conditions[0].status == "True"
    answer = api.delete_api_service(METRICS)
    assert answer["kind"] == "Status"
    assert answer["details"] == {
        "name": METRICS,
        "group": "apiregistration.k8s.io",
        "kind": "apiservices",
        "uid": made.metadata.uid,
    }
    with pytest.raises(ApiException) as err:
        api.read_api_service(METRICS)
    assert err.value.status == 404


def test_apiservice_validation_is_upstreams(api: client.ApiregistrationV1Api) -> None:
    bad = metrics_service(
        "v1beta1.bad.example.com", version="V1", group_priority_minimum=0, version_priority=1001
    )
    with pytest.raises(ApiException) as err:
        api.create_api_service(bad)
    status = json.loads(err.value.body)
    assert (err.value.status, status["reason"]) == (422, "Invalid")
    assert [(c["field"], c["message"]) for c in status["details"]["causes"]] == [
        ("metadata.name", 'Invalid value: "v1beta1.bad.example.com": '
         'must be `spec.version+"."+spec.group`: "V1.metrics.k8s.io"'),
        ("spec.version", 'Invalid value: "V1": a DNS-1035 label must consist of lower case '
         "alphanumeric characters or '-', start with an alphabetic character, and end with an "
         "alphanumeric character (e.g. 'my-name',  or 'abc-123', regex used for validation is "
         "'[a-z]([-a-z0-9]*[a-z0-9])?')"),
        ("spec.groupPriorityMinimum", "Invalid value: 0: must be positive and less than 20000"),
        ("spec.versionPriority", "Invalid value: 1001: must be positive and less than 1000"),
    ]  # fmt: skip
    local = client.V1APIService(
        metadata=client.V1ObjectMeta(name="v1.example.com"),
        spec=client.V1APIServiceSpec(
            group="example.com", version="v1", group_priority_minimum=1, version_priority=1,
            insecure_skip_tls_verify=True,
        ),
    )  # fmt: skip
    with pytest.raises(ApiException) as err:
        api.create_api_service(local)
    [cause] = json.loads(err.value.body)["details"]["causes"]
    assert cause["message"] == (
        "Invalid value: true: local APIServices may not have insecureSkipTLSVerify"
    )


def test_kubectl_finds_and_prints_apiservices(cluster: EmbeddedCluster) -> None:
    kubectl = Kubectl(cluster.kubeconfig)
    resources = kubectl.run("api-resources", "--api-group=apiregistration.k8s.io").stdout
    assert "apiservices" in resources and "APIService" in resources
    printed = kubectl.run("get", "apiservices", "v1.", "v1.apps").stdout.splitlines()
    assert printed[0].split() == ["NAME", "SERVICE", "AVAILABLE", "AGE"]
    assert [line.split()[:3] for line in printed[1:]] == [
        ["v1.", "Local", "True"],
        ["v1.apps", "Local", "True"],
    ]
