"""Pod-specific API semantics: defaulting, update validation, graceful deletion, binding.

Binding follows upstream's ``BindingREST`` exactly: 409 "already assigned" when the pod has a
node, 409 on a uid/resourceVersion precondition mismatch, 409 for a pod being deleted; it
sets ``spec.nodeName`` and the ``PodScheduled`` condition and checks no capacity (that is the
kubelet's job, which rejects with OutOfcpu/OutOfmemory/OutOfpods).
"""

from __future__ import annotations

from typing import Any

from simcluster.apiserver.meta import rfc3339
from simcluster.apiserver.validation.fields import not_supported, required
from simcluster.apiserver.validation.podspec import pod_spec_causes
from simcluster.errors import Conflict, Invalid
from simcluster.quantity import to_milli, to_units

__all__ = [
    "bind",
    "check_update",
    "default_pod",
    "pod_grace",
    "pod_requests",
    "qos_class",
    "validate_binding",
]

Obj = dict[str, Any]

_DEFAULT_TOLERATIONS = (
    {
        "key": "node.kubernetes.io/not-ready",
        "operator": "Exists",
        "effect": "NoExecute",
        "tolerationSeconds": 300,
    },
    {
        "key": "node.kubernetes.io/unreachable",
        "operator": "Exists",
        "effect": "NoExecute",
        "tolerationSeconds": 300,
    },
)
_UPDATE_FORBIDDEN = (
    "pod updates may not change fields other than `spec.containers[*].image`,"
    "`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` "
    "(only additions to existing tolerations),`spec.terminationGracePeriodSeconds` "
    "(allow it to be set to 1 if it was previously negative)"
)


def _default_container(c: Obj) -> None:
    image = str(c.get("image", ""))
    tag = image.rsplit("/", 1)[-1]
    latest = "@" not in tag and (":" not in tag or tag.endswith(":latest"))
    c.setdefault("imagePullPolicy", "Always" if latest else "IfNotPresent")
    c.setdefault("terminationMessagePath", "/dev/termination-log")
    c.setdefault("terminationMessagePolicy", "File")
    res = c.setdefault("resources", {})
    limits = res.get("limits") or {}
    if limits:
        req = res.setdefault("requests", {})
        for k, v in limits.items():
            req.setdefault(k, v)
    for p in c.get("ports") or []:
        p.setdefault("protocol", "TCP")


def _walkable(spec: object) -> bool:
    if not isinstance(spec, dict):
        return False
    containers, init = spec.get("containers"), spec.get("initContainers") or []
    if not isinstance(containers, list) or not containers or not isinstance(init, list):
        return False
    return all(isinstance(c, dict) for c in [*containers, *init])


def _check_shape(pod: Obj) -> None:
    """Refuse a spec defaulting cannot walk (no containers, or non-objects where objects
    belong) with every cause ``ValidatePodSpec`` finds in it; the full validation runs on
    the defaulted pod (``PodStrategy.validate_create``)."""
    spec = pod.get("spec")
    if not _walkable(spec):
        causes = pod_spec_causes(spec) or [("FieldValueInvalid", "spec", "Invalid value")]
        raise Invalid.for_object("Pod", "", pod["metadata"]["name"], causes)


def qos_class(pod: Obj) -> str:
    containers = pod["spec"].get("containers") or []
    any_set, guaranteed = False, True
    for c in containers:
        res = c.get("resources") or {}
        req, lim = res.get("requests") or {}, res.get("limits") or {}
        if req or lim:
            any_set = True
        for r in ("cpu", "memory"):
            if r not in lim or req.get(r, lim.get(r)) != lim.get(r):
                guaranteed = False
    if not any_set:
        return "BestEffort"
    return "Guaranteed" if guaranteed else "Burstable"


def default_pod(pod: Obj) -> None:
    _check_shape(pod)
    spec = pod["spec"]
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("schedulerName", "default-scheduler")
    spec.setdefault("securityContext", {})
    spec.setdefault("serviceAccountName", spec.get("serviceAccount") or "default")
    spec.setdefault("serviceAccount", spec["serviceAccountName"])
    spec.setdefault("enableServiceLinks", True)
    spec.setdefault("priority", 0)
    spec.setdefault("preemptionPolicy", "PreemptLowerPriority")
    tolerations = spec.setdefault("tolerations", [])
    for t in _DEFAULT_TOLERATIONS:
        if not any(x.get("key") == t["key"] for x in tolerations):
            tolerations.append(dict(t))
    for c in spec.get("containers", []) + spec.get("initContainers", []):
        _default_container(c)
    pod["status"] = {"phase": "Pending", "qosClass": qos_class(pod)}
    if spec.get("nodeName"):
        pod["status"]["conditions"] = [_scheduled_condition()]


def _scheduled_condition() -> Obj:
    return {
        "type": "PodScheduled",
        "status": "True",
        "lastProbeTime": None,
        "lastTransitionTime": rfc3339(),
    }


def _mutable_view(spec: Obj) -> Obj:
    view = dict(spec)
    for key in ("containers", "initContainers"):
        view[key] = [{k: v for k, v in c.items() if k != "image"} for c in spec.get(key) or []]
    for key in (
        "activeDeadlineSeconds",
        "tolerations",
        "schedulingGates",
        "terminationGracePeriodSeconds",
    ):
        view.pop(key, None)
    return view


def check_update(new: Obj, old: Obj) -> None:
    """Reject spec changes the real server forbids on a pod."""
    if _mutable_view(new.get("spec") or {}) != _mutable_view(old.get("spec") or {}):
        raise Invalid.for_object(
            "Pod",
            "",
            new["metadata"]["name"],
            [("FieldValueForbidden", "spec", f"Forbidden: {_UPDATE_FORBIDDEN}")],
        )
    old_tol = old["spec"].get("tolerations") or []
    new_tol = new["spec"].get("tolerations") or []
    if any(t not in new_tol for t in old_tol):
        raise Invalid.for_object(
            "Pod",
            "",
            new["metadata"]["name"],
            [
                (
                    "FieldValueForbidden",
                    "spec.tolerations",
                    "Forbidden: existing toleration can not be modified except its tolerationSeconds",  # noqa: E501
                )
            ],
        )


def pod_grace(pod: Obj, requested: int | None) -> int:
    """Upstream CheckGracefulDelete: unscheduled or terminal pods go at once; a negative
    period (asked for, or the pod's ``terminationGracePeriodSeconds``) is 1 s."""
    spec, status = pod.get("spec") or {}, pod.get("status") or {}
    if requested is not None:
        grace = int(requested)
    else:
        grace = int(spec.get("terminationGracePeriodSeconds", 30))
    if not spec.get("nodeName") or status.get("phase") in ("Succeeded", "Failed"):
        return 0
    return 1 if grace < 0 else grace


def pod_requests(pod: Obj) -> tuple[int, int]:
    """(milli-CPU, memory bytes) requested: max(sum(containers), max(initContainers))."""
    spec = pod.get("spec") or {}

    def req(c: Obj, r: str) -> int:
        v = ((c.get("resources") or {}).get("requests") or {}).get(r)
        if v is None:
            return 0
        return to_milli(v) if r == "cpu" else to_units(v)

    cpu = sum(req(c, "cpu") for c in spec.get("containers") or [])
    mem = sum(req(c, "memory") for c in spec.get("containers") or [])
    for c in spec.get("initContainers") or []:
        cpu, mem = max(cpu, req(c, "cpu")), max(mem, req(c, "memory"))
    return cpu, mem


def validate_binding(binding: Obj, name: str) -> None:
    """Upstream's ``ValidatePodBinding``: a target of kind Node (or none) with a name."""
    target = binding.get("target")
    if not isinstance(target, dict):
        target = {}
    causes = []
    if target.get("kind") not in (None, "", "Node"):
        causes.append(not_supported("target.kind", target["kind"], ("Node", "<empty>")))
    if not target.get("name"):
        causes.append(required("target.name"))
    if causes:
        raise Invalid.for_object("Binding", "", name, causes)


def bind(pod: Obj, binding: Obj) -> Obj:
    """Return the bound copy of ``pod`` or raise the upstream error (``binding`` passed
    ``validate_binding``)."""
    name = pod["metadata"]["name"]
    node = binding["target"]["name"]
    bmeta = binding.get("metadata") or {}
    meta = pod["metadata"]
    if bmeta.get("uid") and bmeta["uid"] != meta["uid"]:
        raise Conflict.for_object(
            "pods",
            "",
            name,
            f"Precondition failed: UID in precondition: {bmeta['uid']}, UID in object meta: {meta['uid']}",  # noqa: E501
        )
    if bmeta.get("resourceVersion") and bmeta["resourceVersion"] != meta["resourceVersion"]:
        raise Conflict.for_object(
            "pods",
            "",
            name,
            "the object has been modified; please apply your changes to the latest version and try again",  # noqa: E501
        )
    if meta.get("deletionTimestamp"):
        raise Conflict.for_object(
            "pods/binding", "", name, f"pod {name} is being deleted, cannot be assigned to a host"
        )
    if pod["spec"].get("nodeName"):
        raise Conflict.for_object(
            "pods/binding",
            "",
            name,
            f'pod {name} is already assigned to node "{pod["spec"]["nodeName"]}"',
        )
    new = dict(pod)
    new["metadata"] = dict(meta)
    if bmeta.get("annotations"):
        new["metadata"]["annotations"] = {**(meta.get("annotations") or {}), **bmeta["annotations"]}
    new["spec"] = dict(pod["spec"], nodeName=node)
    status = dict(pod.get("status") or {})
    conditions = [c for c in status.get("conditions") or [] if c.get("type") != "PodScheduled"]
    conditions.append(_scheduled_condition())
    status["conditions"] = conditions
    new["status"] = status
    return new
