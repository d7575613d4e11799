"""Pod Security admission as upstream's plugin: each check of the Pod Security Standards with
a pod that passes it and one that fails it, created through raw HTTP in a namespace labelled
with the check's level, the refusal a 403 with upstream's wording; how the namespace labels
resolve to a policy (levels, versions, fail-closed enforce, warn defaulting); the
user-namespace relaxation; and which updates are checked.

docs/simcluster-conformance.md lists these cases against upstream's checks
(``k8s.io/pod-security-admission/policy/check_*.go``).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from simcluster.apiserver import ServerSettings, podsecurity
from simcluster.embedded import EmbeddedCluster
from simcluster.profile import load_profile

Obj = dict[str, Any]
LABEL = "pod-security.kubernetes.io/"
#: a container that meets `restricted` (the starting point every failing case breaks)
HARDENED = {
    "allowPrivilegeEscalation": False,
    "capabilities": {"drop": ["ALL"]},
    "runAsNonRoot": True,
    "seccompProfile": {"type": "RuntimeDefault"},
}
NAMESPACES = {
    "baseline": {LABEL + "enforce": "baseline"},
    "restricted": {LABEL + "enforce": "restricted"},
    "restricted-1-30": {LABEL + "enforce": "restricted", LABEL + "enforce-version": "v1.30"},
    "privileged": {LABEL + "enforce": "privileged"},
}


@contextmanager
def _client(cluster: EmbeddedCluster) -> Iterator[httpx.Client]:
    assert cluster.server is not None and cluster.server.certs is not None
    token = yaml.safe_load(cluster.kubeconfig.read_text())["users"][0]["user"]["token"]
    with httpx.Client(
        base_url=cluster.server.url,
        headers={"Authorization": f"Bearer {token}"},
        verify=cluster.server.certs.client_context(),
        timeout=30,
    ) as client:
        yield client


@pytest.fixture(scope="module")
def http() -> Iterator[httpx.Client]:
    with EmbeddedCluster() as cluster, _client(cluster) as client:
        for name, labels in NAMESPACES.items():
            body = {"metadata": {"name": name, "labels": labels}}
            assert client.post("/api/v1/namespaces", json=body).is_success
        yield client


def _pod(
    container: Obj | None = None, sc: Obj | None = None, meta: Obj | None = None, **spec: Any
) -> Obj:
    """A pod meeting `restricted`, changed by ``container`` (merged into its one container),
    ``sc`` (merged into the container's securityContext), ``meta`` and ``spec`` fields."""
    c: Obj = {"name": "c", "image": "i:1", "securityContext": {**HARDENED, **(sc or {})}}
    c.update(container or {})
    return {"metadata": {"name": "p", **(meta or {})}, "spec": {"containers": [c], **spec}}


def _create(http: httpx.Client, namespace: str, pod: Obj) -> httpx.Response:
    r = http.post(f"/api/v1/namespaces/{namespace}/pods", json=pod)
    if r.status_code == 201:
        name = r.json()["metadata"]["name"]
        http.delete(f"/api/v1/namespaces/{namespace}/pods/{name}", params={"gracePeriodSeconds": 0})
    return r


APPARMOR = "container.apparmor.security.beta.kubernetes.io/c"
HOST_PATH = [{"name": "h", "hostPath": {"path": "/etc"}}]
# (id, level, passing pod, failing pod, the failure's "reason (detail)" as upstream words it)
CASES = [
    ("hostProcess", "baseline",
     _pod(sc={"windowsOptions": {"hostProcess": False}}),
     _pod(sc={"windowsOptions": {"hostProcess": True}}),
     'hostProcess (container "c" must not set securityContext.windowsOptions.hostProcess=true)'),
    ("hostNamespaces", "baseline", _pod(hostNetwork=False), _pod(hostNetwork=True, hostPID=True),
     "host namespaces (hostNetwork=true, hostPID=true)"),
    ("privileged", "baseline", _pod(sc={"privileged": False}), _pod(sc={"privileged": True}),
     'privileged (container "c" must not set securityContext.privileged=true)'),
    ("capabilities_baseline", "baseline",
     _pod(sc={"capabilities": {"add": ["CHOWN", "SETUID"]}}),
     _pod(sc={"capabilities": {"add": ["NET_RAW", "SYS_ADMIN", "CHOWN"]}}),
     'non-default capabilities (container "c" must not include "NET_RAW", "SYS_ADMIN" in '
     "securityContext.capabilities.add)"),
    ("hostPathVolumes", "baseline", _pod(volumes=[{"name": "e", "emptyDir": {}}]),
     _pod(volumes=HOST_PATH), 'hostPath volumes (volume "h")'),
    ("hostPorts", "baseline", _pod({"ports": [{"containerPort": 80}]}),
     _pod({"ports": [{"containerPort": 80, "hostPort": 8080}, {"containerPort": 9,
                                                               "hostPort": 90}]}),
     'hostPort (container "c" uses hostPorts 8080, 90)'),
    ("appArmorProfile", "baseline", _pod(sc={"appArmorProfile": {"type": "RuntimeDefault"}}),
     _pod(sc={"appArmorProfile": {"type": "Unconfined"}}),
     'forbidden AppArmor profile (container "c" must not set AppArmor profile type to '
     '"Unconfined")'),
    ("appArmorProfile-annotation", "baseline",
     _pod(meta={"annotations": {APPARMOR: "runtime/default"}}),
     _pod(meta={"annotations": {APPARMOR: "unconfined"}}),
     "forbidden AppArmor profile (annotation must not set AppArmor profile type to "
     '"container.apparmor.security.beta.kubernetes.io/c="unconfined"")'),
    ("seLinuxOptions", "baseline", _pod(sc={"seLinuxOptions": {"type": "container_t"}}),
     _pod(sc={"seLinuxOptions": {"type": "spc_t", "user": "root"}}),
     'seLinuxOptions (container "c" set forbidden securityContext.seLinuxOptions: type '
     '"spc_t"; user may not be set)'),
    ("procMount", "baseline", _pod(sc={"procMount": "Default"}), _pod(sc={"procMount": "Unmasked"}),
     'procMount (container "c" must not set securityContext.procMount to "Unmasked")'),
    ("seccompProfile_baseline", "baseline", _pod(sc={"seccompProfile": {"type": "Localhost"}}),
     _pod(securityContext={"seccompProfile": {"type": "Unconfined"}}),
     'seccompProfile (pod must not set securityContext.seccompProfile.type to "Unconfined")'),
    ("sysctls", "baseline",
     _pod(securityContext={"sysctls": [{"name": "net.ipv4.tcp_keepalive_time", "value": "60"}]}),
     _pod(securityContext={"sysctls": [{"name": "kernel.msgmax", "value": "1"}]}),
     "forbidden sysctls (kernel.msgmax)"),
    ("hostProbesAndHostLifecycle", "baseline",
     _pod({"readinessProbe": {"httpGet": {"port": 80}}}),
     _pod({"readinessProbe": {"httpGet": {"port": 80, "host": "10.0.0.1"}}}),
     'probe or lifecycle host (container "c" uses probe or lifecycle host "10.0.0.1")'),
    ("restrictedVolumes", "restricted",
     _pod(volumes=[{"name": "b", "image": {"reference": "b:1"}}, {"name": "e", "emptyDir": {}}]),
     _pod(volumes=[*HOST_PATH, {"name": "n", "nfs": {"server": "s", "path": "/"}}]),
     'restricted volume types (volumes "h", "n" use restricted volume types "hostPath", "nfs")'),
    ("allowPrivilegeEscalation", "restricted", _pod(),
     _pod(sc={"allowPrivilegeEscalation": True}),
     'allowPrivilegeEscalation != false (container "c" must set '
     "securityContext.allowPrivilegeEscalation=false)"),
    ("runAsNonRoot", "restricted",
     _pod(securityContext={"runAsNonRoot": True}, sc={"runAsNonRoot": None}),
     _pod(sc={"runAsNonRoot": None}),
     'runAsNonRoot != true (pod or container "c" must set securityContext.runAsNonRoot=true)'),
    ("runAsUser", "restricted", _pod(sc={"runAsUser": 1000}), _pod(sc={"runAsUser": 0}),
     'runAsUser=0 (container "c" must not set runAsUser=0)'),
    ("seccompProfile_restricted", "restricted",
     _pod(securityContext={"seccompProfile": {"type": "RuntimeDefault"}},
          sc={"seccompProfile": None}),
     _pod(sc={"seccompProfile": None}),
     'seccompProfile (pod or container "c" must set securityContext.seccompProfile.type to '
     '"RuntimeDefault" or "Localhost")'),
    ("capabilities_restricted", "restricted",
     _pod(sc={"capabilities": {"drop": ["ALL"], "add": ["NET_BIND_SERVICE"]}}),
     _pod(sc={"capabilities": {"drop": ["NET_RAW"], "add": ["CHOWN"]}}),
     'unrestricted capabilities (container "c" must set securityContext.capabilities.drop=["ALL"]; '
     'container "c" must not include "CHOWN" in securityContext.capabilities.add)'),
    ("procMount_restricted", "restricted", _pod(hostUsers=False, sc={"runAsNonRoot": None}),
     _pod(hostUsers=False, sc={"procMount": "Unmasked"}),
     'procMount (container "c" must not set securityContext.procMount to "Unmasked")'),
]  # fmt: skip


@pytest.mark.parametrize(
    ("level", "passing", "failing", "why"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_each_check_admits_a_passing_pod_and_refuses_a_failing_one(
    http: httpx.Client, level: str, passing: Obj, failing: Obj, why: str
) -> None:
    assert _create(http, level, passing).status_code == 201
    r = _create(http, level, failing)
    assert r.status_code == 403, r.text
    status = r.json()
    assert status["reason"] == "Forbidden"
    assert status["details"] == {"name": "p", "kind": "pods"}
    assert (
        status["message"] == f'pods "p" is forbidden: violates PodSecurity "{level}:latest": {why}'
    )
    if level == "baseline":  # what baseline refuses, privileged admits
        assert _create(http, "privileged", failing).status_code == 201


def test_every_failed_check_is_named_baseline_first_each_sorted(http: httpx.Client) -> None:
    pod = _pod(
        sc={"privileged": True, "allowPrivilegeEscalation": None, "runAsUser": 0}, hostIPC=True
    )
    message = _create(http, "restricted", pod).json()["message"]
    reasons = [
        "host namespaces (hostIPC=true)",
        'privileged (container "c"',
        "allowPrivilegeEscalation != false",
        "runAsUser=0",
    ]
    at = [message.index(r) for r in reasons]
    assert at == sorted(at), message


def test_a_user_namespaced_pod_may_run_as_root_from_v1_35(http: httpx.Client) -> None:
    """The relaxation for ``hostUsers: false`` (upstream's runAsNonRoot/runAsUser checks at
    1.35+): root in the pod is not root on the node. Older policy versions still refuse."""
    root = _pod(hostUsers=False, sc={"runAsNonRoot": None, "runAsUser": 0})
    assert _create(http, "restricted", root).status_code == 201
    r = _create(http, "restricted-1-30", root)
    assert r.status_code == 403
    assert "runAsNonRoot != true" in r.json()["message"]
    assert "runAsUser=0" in r.json()["message"]
    host_users = _pod(hostUsers=True, sc={"runAsNonRoot": None})
    assert "runAsNonRoot != true" in _create(http, "restricted", host_users).json()["message"]


def test_updates_are_checked_when_an_image_changes(http: httpx.Client) -> None:
    """Upstream checks an update only when it can change what the checks see; the pod's
    security context is immutable, so a namespace made stricter later admits the old pod's
    label changes but refuses an image update of a pod that no longer passes."""
    body = {
        "metadata": {"name": "u", "labels": {"a": "b"}},
        "spec": _pod(sc={"runAsNonRoot": None})["spec"],
    }
    http.post("/api/v1/namespaces", json={"metadata": {"name": "later"}})
    assert http.post("/api/v1/namespaces/later/pods", json=body).status_code == 201
    labels = {"metadata": {"labels": {LABEL + "enforce": "restricted"}}}
    merge = {"Content-Type": "application/merge-patch+json"}
    assert http.patch("/api/v1/namespaces/later", json=labels, headers=merge).is_success
    r = http.patch(
        "/api/v1/namespaces/later/pods/u", json={"metadata": {"labels": {"a": "c"}}}, headers=merge
    )
    assert r.status_code == 200, r.text
    image = {"spec": {"containers": [{"name": "c", "image": "i:2"}]}}
    strategic = {"Content-Type": "application/strategic-merge-patch+json"}
    r = http.patch("/api/v1/namespaces/later/pods/u", json=image, headers=strategic)
    assert r.status_code == 403, r.text
    assert "runAsNonRoot != true" in r.json()["message"]


def test_an_unlabelled_namespace_is_privileged(http: httpx.Client) -> None:
    http.post("/api/v1/namespaces", json={"metadata": {"name": "plain"}})
    assert _create(http, "plain", _pod(sc={"privileged": True}, hostPID=True)).status_code == 201


@pytest.mark.parametrize(
    ("labels", "enforce", "warn"),
    [
        ({}, "privileged:latest", "privileged:latest"),
        ({"enforce": "baseline", "enforce-version": "v1.29"}, "baseline:v1.29", "baseline:v1.29"),
        ({"enforce": "restricted", "warn": "baseline"}, "restricted:latest", "baseline:latest"),
        ({"enforce": "baseline", "warn-version": "v1.20"}, "baseline:latest", "baseline:v1.20"),
        ({"enforce": "bogus"}, "restricted:latest", "privileged:latest"),
        ({"enforce": "baseline", "enforce-version": "1.29"}, "baseline:latest", "baseline:latest"),
        ({"warn": "bogus"}, "privileged:latest", "privileged:latest"),
    ],
)
def test_namespace_labels_resolve_as_upstreams_policy(
    labels: dict[str, str], enforce: str, warn: str
) -> None:
    """Upstream's ``PolicyToEvaluate``: an unparsable enforce level fails closed, warn and
    audit fail open, a bad version is latest, warn follows a stricter enforce."""
    policy = podsecurity.policy_of({LABEL + k: v for k, v in labels.items()})
    assert (str(policy.enforce), str(policy.warn)) == (enforce, warn)


def test_older_versions_run_older_checks() -> None:
    """A check starts at its version: runAsUser=0 is refused from 1.23, probe hosts from 1.34;
    before 1.19 the seccomp check reads the annotations, not the fields."""
    root = _pod(sc={"runAsUser": 0})
    at = podsecurity.LevelVersion
    assert [r for r, _ in podsecurity.evaluate(at("restricted", 22), root)] == []
    assert [r for r, _ in podsecurity.evaluate(at("restricted", 23), root)] == ["runAsUser=0"]
    probe = _pod({"readinessProbe": {"tcpSocket": {"port": 1, "host": "h"}}})
    assert podsecurity.evaluate(at("baseline", 33), probe) == []
    assert podsecurity.evaluate(at("baseline", 34), probe) != []
    unconfined = _pod(sc={"seccompProfile": {"type": "Unconfined"}})
    assert podsecurity.evaluate(at("baseline", 18), unconfined) == []
    annotated = _pod(
        meta={"annotations": {"seccomp.security.alpha.kubernetes.io/pod": "unconfined"}}
    )
    assert podsecurity.evaluate(at("baseline", 18), annotated) == [
        (
            "seccompProfile",
            'forbidden annotation seccomp.security.alpha.kubernetes.io/pod="unconfined"',
        )
    ]


def test_an_exempt_runtime_class_is_not_checked() -> None:
    """Upstream's ``exemptions.runtimeClasses``: a pod of an exempt RuntimeClass is admitted
    whatever it sets; any other class is checked as ever."""
    settings = ServerSettings(pod_security_exempt_runtime_classes=("gvisor",))
    with EmbeddedCluster(settings) as cluster, _client(cluster) as http:
        namespace = {"metadata": {"name": "r", "labels": NAMESPACES["restricted"]}}
        assert http.post("/api/v1/namespaces", json=namespace).is_success
        root = _pod(sc={"runAsNonRoot": None, "privileged": True})
        for runtime, code in (("gvisor", 201), ("runc", 403)):
            pod = {**root, "spec": {**root["spec"], "runtimeClassName": runtime}}
            assert _create(http, "r", pod).status_code == code


def test_a_profile_configures_the_exempt_runtime_classes(tmp_path: Path) -> None:
    profile = tmp_path / "p.yaml"
    profile.write_text("apiserver:\n  pod_security: {exempt_runtime_classes: [gvisor]}\n")
    settings = load_profile(str(profile))
    assert settings.server.pod_security_exempt_runtime_classes == ("gvisor",)
