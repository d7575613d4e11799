"""Every sandbox pod Sandman renders is admitted by Pod Security `restricted` — for real: each
pod is created in simcluster in a namespace carrying the labels of the shipped tenant
namespace (manifests/tenant/namespace.yaml), whose admission runs upstream's checks
(simcluster/apiserver/podsecurity.py). Every class of every configuration Sandman ships (the
production overlay, the devstack), with every daemon delivery the restricted level admits,
and any valid create request (hypothesis); the documented relaxations are refused by
`restricted` with upstream's message and admitted by the level the guide names.
"""

from __future__ import annotations

import itertools
import string
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import msgspec
import pytest
import yaml
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from devstack.stack import Stack, StackSettings
from facade.config import load_config
from facade.podspec import DaemonDelivery, SandboxClass, render_pod
from sandman.wire.facade import CreateSandbox
from simcluster.apiserver import ServerSettings
from simcluster.embedded import EmbeddedCluster

Obj = dict[str, Any]
MANIFESTS = Path(__file__).resolve().parents[2] / "manifests"
NOW = datetime(2026, 12, 1, tzinfo=UTC)
REQUEST = CreateSandbox(image="registry.example/tasks/t:1", owner="run-1")
LEVEL = "pod-security.kubernetes.io/enforce"
#: the deliveries `restricted` admits (host-path mounts a hostPath: see its own test)
DELIVERIES = [
    DaemonDelivery("init-container", bundle_image="registry.example/sandman/bundle:0.1"),
    DaemonDelivery("image-volume", bundle_image="registry.example/sandman/bundle:0.1"),
    DaemonDelivery("local-process", python=("/usr/bin/python3",)),
]
_names = (f"sb-{i}" for i in itertools.count())


def _tenant_labels() -> dict[str, str]:
    namespace = yaml.safe_load((MANIFESTS / "tenant" / "namespace.yaml").read_text())
    return dict(namespace["metadata"]["labels"])


@contextmanager
def _cluster(exempt: tuple[str, ...]) -> Iterator[httpx.Client]:
    """A cluster whose PodSecurity admission exempts the RuntimeClasses ``exempt``, with a
    tenant namespace as shipped and one namespace at each looser level."""
    settings = ServerSettings(pod_security_exempt_runtime_classes=exempt)
    with EmbeddedCluster(settings) as cluster:
        assert cluster.server is not None and cluster.server.certs is not None
        token = yaml.safe_load(cluster.kubeconfig.read_text())["users"][0]["user"]["token"]
        with httpx.Client(
            base_url=cluster.server.url,
            headers={"Authorization": f"Bearer {token}"},
            verify=cluster.server.certs.client_context(),
            timeout=30,
        ) as client:
            namespaces = {
                "tenant": _tenant_labels(),
                "baseline": {LEVEL: "baseline"},
                "privileged": {LEVEL: "privileged"},
            }
            for name, labels in namespaces.items():
                body = {"metadata": {"name": name, "labels": labels}}
                assert client.post("/api/v1/namespaces", json=body).is_success
            yield client


@pytest.fixture(scope="module")
def http() -> Iterator[httpx.Client]:
    """Configured as the operator guide says for the production overlay: the gVisor
    RuntimeClass exempt (its classes cannot use a user namespace)."""
    with _cluster(exempt=("gvisor",)) as client:
        yield client


def _create(
    http: httpx.Client,
    namespace: str,
    sandbox_class: SandboxClass,
    delivery: DaemonDelivery,
    request: CreateSandbox = REQUEST,
) -> httpx.Response:
    pod = render_pod(
        request, sandbox_class, delivery, name=next(_names), namespace=namespace,
        tenant="t", token="tok", now=NOW,
    )  # fmt: skip
    return http.post(f"/api/v1/namespaces/{namespace}/pods", json=pod)


def _production_classes(tmp_path: Path) -> list[SandboxClass]:
    """The production overlay's facade.yaml, read by the facade's own parser."""
    document = yaml.safe_load((MANIFESTS / "overlays" / "production" / "facade.yaml").read_text())
    document.pop("secret_file")
    document.pop("delivery_file")
    document |= {"secret": "s" * 48, "delivery": {"mode": "local-process"}}
    path = tmp_path / "production.yaml"
    path.write_text(yaml.safe_dump(document))
    return list(load_config(path).classes.values())


def _devstack_classes(tmp_path: Path) -> list[SandboxClass]:
    """The devstack's facade config, as `sandman-dev up` writes it."""
    path = Stack(StackSettings(workdir=tmp_path)).write_facade_config()
    return list(load_config(path).classes.values())


def test_the_tenant_namespace_enforces_restricted() -> None:
    assert _tenant_labels()[LEVEL] == "restricted"


@pytest.mark.parametrize("delivery", DELIVERIES, ids=lambda d: d.mode)
@pytest.mark.parametrize("source", [_production_classes, _devstack_classes])
def test_every_shipped_class_is_admitted_by_restricted(
    http: httpx.Client, tmp_path: Path, source: Any, delivery: DaemonDelivery
) -> None:
    classes = source(tmp_path)
    assert classes
    for sandbox_class in classes:
        r = _create(http, "tenant", sandbox_class, delivery)
        assert r.status_code == 201, (sandbox_class.name, r.json()["message"])


def test_the_gvisor_class_needs_its_exemption_or_baseline(tmp_path: Path) -> None:
    """Without the exemption the production overlay's gVisor class (no user namespace: runsc
    has none) is refused by `restricted` — root images need the relaxation, stated in the
    class's comment and the guide — and admitted by `baseline`."""
    (isolated,) = [c for c in _production_classes(tmp_path) if c.runtime_class == "gvisor"]
    assert not isolated.user_namespace
    with _cluster(exempt=()) as http:
        r = _create(http, "tenant", isolated, DELIVERIES[0])
        assert r.status_code == 403
        assert "runAsNonRoot != true (pod or containers " in r.json()["message"]
        assert _create(http, "baseline", isolated, DELIVERIES[0]).status_code == 201


def test_host_path_delivery_needs_a_privileged_namespace(http: httpx.Client) -> None:
    """The documented exception: the host-path delivery mounts a hostPath into the pod,
    which baseline already refuses."""
    delivery = DaemonDelivery("host-path")
    tiny = SandboxClass("tiny")
    r = _create(http, "tenant", tiny, delivery)
    assert r.status_code == 403
    assert r.json()["message"].endswith(
        'violates PodSecurity "restricted:latest": restricted volume types '
        '(volume "sandman" uses restricted volume type "hostPath")'
    )
    r = _create(http, "baseline", tiny, delivery)
    assert r.json()["message"].endswith('"baseline:latest": hostPath volumes (volume "sandman")')
    assert _create(http, "privileged", tiny, delivery).status_code == 201


def test_relaxed_classes_are_refused_by_restricted_and_admitted_by_baseline(
    http: httpx.Client,
) -> None:
    """The per-class relaxations the operator guide lists, each worded as upstream's."""
    delivery = DELIVERIES[0]
    capabilities = SandboxClass("build", capabilities=("CHOWN", "NET_BIND_SERVICE", "SETUID"))
    r = _create(http, "tenant", capabilities, delivery)
    assert r.status_code == 403
    assert r.json()["message"].endswith(
        'unrestricted capabilities (containers "sandman-bundle", "sandbox" must not include '
        '"CHOWN", "SETUID" in securityContext.capabilities.add)'
    )
    no_userns = SandboxClass("runc", user_namespace=False)
    r = _create(http, "tenant", no_userns, delivery)
    assert r.status_code == 403
    assert r.json()["message"].endswith(
        'runAsNonRoot != true (pod or containers "sandman-bundle", "sandbox" must set '
        "securityContext.runAsNonRoot=true)"
    )
    for relaxed in (capabilities, no_userns):
        assert _create(http, "baseline", relaxed, delivery).status_code == 201


LABEL_VALUE = st.from_regex(r"[a-z0-9]([a-z0-9._-]{0,20}[a-z0-9])?", fullmatch=True)
ENV_NAME = st.from_regex(r"[A-Z_][A-Z0-9_]{0,12}", fullmatch=True).filter(
    lambda n: not n.startswith("SANDMAN_")
)
REQUESTS = st.fixed_dictionaries(
    {
        "image": st.from_regex(
            r"[a-z0-9]{1,8}(\.[a-z]{2,4})?/[a-z0-9_-]{1,12}(:[a-z0-9.]{1,6})?", fullmatch=True
        ),
        "owner": LABEL_VALUE,
        "ttl_s": st.integers(1, 86_400),
        "idle_timeout_s": st.none() | st.integers(1, 86_400),
        "env": st.dictionaries(ENV_NAME, st.text(string.printable, max_size=20), max_size=4),
        "labels": st.dictionaries(LABEL_VALUE, LABEL_VALUE, max_size=3),
    }
)
CLASSES = st.builds(
    SandboxClass,
    name=st.just("c"),
    runtime_class=st.none() | st.just("kata"),  # gvisor is exempt in ``http``
    capabilities=st.sampled_from([(), ("NET_BIND_SERVICE",)]),
)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=REQUESTS, sandbox_class=CLASSES, delivery=st.sampled_from(DELIVERIES))
def test_any_valid_request_renders_a_pod_restricted_admits(
    http: httpx.Client, data: Obj, sandbox_class: SandboxClass, delivery: DaemonDelivery
) -> None:
    """Whatever a trainer asks for (the request is validated as the facade decodes it), the
    pod is hardened the same way: nothing in a request can weaken it."""
    try:
        request = msgspec.convert(data, CreateSandbox)
    except msgspec.ValidationError:
        assume(False)
        raise
    r = _create(http, "tenant", sandbox_class, delivery, request)
    assert r.status_code == 201, r.json()["message"]
