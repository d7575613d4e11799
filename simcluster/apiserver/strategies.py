"""Kind-specific behaviour hooked into the generic verbs (upstream's "strategies" and the
admission plugins Sandman meets): pods, namespaces, services, resource quotas, CRDs, tokens.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from simcluster.apiserver import pods
from simcluster.apiserver.auth import Authenticator, service_account_user
from simcluster.apiserver.deferred import call_soon
from simcluster.apiserver.meta import now, rfc3339
from simcluster.apiserver.resources import ResourceType
from simcluster.errors import Conflict, Forbidden, Invalid, NotFound
from simcluster.quantity import format_cpu, format_memory, to_milli, to_units

if TYPE_CHECKING:
    from simcluster.apiserver.core import ApiCore

__all__ = ["Strategies", "invalid", "required"]

Obj = dict[str, Any]
PODS, NAMESPACES, QUOTAS, CRDS = (
    "/pods",
    "/namespaces",
    "/resourcequotas",
    "apiextensions.k8s.io/customresourcedefinitions",
)
_QUOTA_KEYS = (
    "pods",
    "count/pods",
    "requests.cpu",
    "cpu",
    "requests.memory",
    "memory",
    "limits.cpu",
    "limits.memory",
)


def invalid(rt: ResourceType, name: str, field: str, msg: str) -> Invalid:
    return Invalid.for_object(
        rt.kind, rt.group, name, [("FieldValueInvalid", field, f"Invalid value: {msg}")]
    )


def required(rt: ResourceType, name: str, field: str, msg: str) -> Invalid:
    return Invalid.for_object(
        rt.kind, rt.group, name, [("FieldValueRequired", field, f"Required value: {msg}")]
    )


def _pod_usage(pod: Obj) -> dict[str, int]:
    cpu, mem = pods.pod_requests(pod)
    lcpu = lmem = 0
    for c in pod["spec"].get("containers") or []:
        lim = (c.get("resources") or {}).get("limits") or {}
        lcpu += to_milli(lim["cpu"]) if "cpu" in lim else 0
        lmem += to_units(lim["memory"]) if "memory" in lim else 0
    return {
        "pods": 1000, "count/pods": 1000, "requests.cpu": cpu, "cpu": cpu,
        "requests.memory": mem * 1000, "memory": mem * 1000,
        "limits.cpu": lcpu, "limits.memory": lmem * 1000,
    }  # fmt: skip


def _milli(key: str, value: Any) -> int:
    """Quota quantities in milli-units so CPU and counts compare exactly."""
    return to_milli(value)


def _fmt(key: str, milli: int) -> str:
    if "cpu" in key:
        return format_cpu(milli)
    if "memory" in key:
        return format_memory(milli // 1000)
    return str(milli // 1000)


class Strategies:
    def __init__(self, core: ApiCore) -> None:
        self.core = core
        self.auth = Authenticator()
        self._next_ip = int(ipaddress.IPv4Address("10.96.0.10"))
        # (namespace, pod, container) -> output; set by the cluster when a runtime keeps logs
        self.log_reader: Callable[[str, str, str], bytes] | None = None

    # --- create ------------------------------------------------------------------------
    def prepare_create(self, rt: ResourceType, obj: Obj) -> None:
        if rt.key == PODS:
            pods.default_pod(obj)
            self._admit_quota(obj)
        elif rt.key == NAMESPACES:
            obj["spec"] = {"finalizers": ["kubernetes"]}
            obj["status"] = {"phase": "Active"}
            obj["metadata"].setdefault("labels", {})["kubernetes.io/metadata.name"] = obj[
                "metadata"
            ]["name"]
        elif rt.key == "/services":
            self._default_service(obj)
        elif rt.key == QUOTAS:
            hard = (obj.get("spec") or {}).get("hard") or {}
            obj["status"] = {
                "hard": dict(hard),
                "used": self._quota_used(obj["metadata"]["namespace"], hard),
            }
        elif rt.key == CRDS:
            self._create_crd(rt, obj)

    def after_write(self, rt: ResourceType, obj: Obj, old: Obj | None) -> None:
        if rt.key == NAMESPACES and old is None:
            sa = self.core.registry.get("", "v1", "serviceaccounts")
            assert sa is not None
            name = obj["metadata"]["name"]
            self.core.create(sa, name, {"metadata": {"name": "default"}})
        elif rt.key == PODS and old is None:
            self._refresh_quotas(obj["metadata"]["namespace"])

    def after_remove(self, rt: ResourceType, obj: Obj) -> None:
        if rt.key == PODS:
            self._refresh_quotas(obj["metadata"]["namespace"])
        elif rt.key == CRDS:
            self._remove_crd(obj)

    # --- update / delete ---------------------------------------------------------------
    def prepare_update(self, rt: ResourceType, new: Obj, old: Obj, subresource: str) -> None:
        if rt.key == PODS and not subresource:
            pods.check_update(new, old)
        elif rt.key == NAMESPACES and not subresource:
            new["spec"], new["status"] = old.get("spec"), old.get("status")
        elif rt.key == "/services" and not subresource:
            self._default_service(new, old)

    def grace_period(self, rt: ResourceType, obj: Obj, requested: Any) -> int:
        if rt.key == PODS:
            return pods.pod_grace(obj, requested)
        if rt.key == NAMESPACES:
            return 1  # never removed at once: the namespace controller empties it first
        return 0

    def prepare_delete(self, rt: ResourceType, obj: Obj) -> None:
        if rt.key == NAMESPACES:
            obj["status"] = {"phase": "Terminating"}
            obj["metadata"]["deletionGracePeriodSeconds"] = 0
            obj["metadata"]["deletionTimestamp"] = rfc3339()
            call_soon(lambda: self._finalize_namespace(obj["metadata"]["name"]))

    def _finalize_namespace(self, name: str) -> None:
        store = self.core.store
        for key in store.keys():  # noqa: SIM118 (Store is not a mapping)
            rt = self.core.registry.for_key(key)
            if rt is None or not rt.namespaced:
                continue
            for obj in list(store.iter(key, name)):
                store.remove(key, obj)
        ns = store.get(NAMESPACES, "", name)
        if ns is not None:
            store.remove(NAMESPACES, ns)

    # --- pods/binding and serviceaccounts/token ----------------------------------------
    def bind(self, namespace: str, name: str, binding: Obj) -> Obj:
        rt = self.core.registry.get("", "v1", "pods")
        assert rt is not None
        if not isinstance(binding, dict):
            binding = {}
        bname = (binding.get("metadata") or {}).get("name")
        if bname and bname != name:
            raise invalid(rt, name, "metadata.name", f'"{bname}": binding name must match the pod')
        pod = self.core.lookup(rt, namespace, name)
        bound = pods.bind(pod, binding)
        self.core.write(rt, bound, pod)
        return {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Success",
            "code": 201,
        }

    def token(self, namespace: str, name: str, body: Obj) -> Obj:
        rt = self.core.registry.get("", "v1", "serviceaccounts")
        assert rt is not None
        self.core.lookup(rt, namespace, name)
        spec = dict((body or {}).get("spec") or {})
        seconds = int(spec.get("expirationSeconds") or 3600)
        spec["expirationSeconds"] = seconds
        token = self.auth.issue(service_account_user(namespace, name))
        return {
            "kind": "TokenRequest",
            "apiVersion": "authentication.k8s.io/v1",
            "metadata": {"name": name, "namespace": namespace, "creationTimestamp": None},
            "spec": spec,
            "status": {
                "token": token,
                "expirationTimestamp": rfc3339(now() + dt.timedelta(seconds=seconds)),
            },
        }

    # --- quota -------------------------------------------------------------------------
    def _quotas(self, namespace: str) -> list[Obj]:
        return list(self.core.store.iter(QUOTAS, namespace))

    def _quota_used(self, namespace: str, hard: dict[str, Any]) -> dict[str, str]:
        totals = dict.fromkeys(hard, 0)
        for pod in self.core.store.iter(PODS, namespace):
            if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
                continue
            usage = _pod_usage(pod)
            for k in totals:
                totals[k] += usage.get(k, 0)
        return {k: _fmt(k, v) for k, v in totals.items()}

    def _admit_quota(self, pod: Obj) -> None:
        namespace, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
        quotas = self._quotas(namespace)
        if not quotas:
            return
        usage = _pod_usage(pod)
        for quota in quotas:
            hard = (quota.get("spec") or {}).get("hard") or {}
            used = (quota.get("status") or {}).get("used") or {}
            qname = quota["metadata"]["name"]
            missing = [
                k
                for k in hard
                if k in ("requests.cpu", "requests.memory", "limits.cpu", "limits.memory")
                and usage.get(k, 0) == 0
            ]
            if missing:
                raise Forbidden.for_object(
                    "pods",
                    "",
                    name,
                    f"failed quota: {qname}: must specify {','.join(sorted(missing))}",
                )
            over = [
                k for k in hard
                if k in _QUOTA_KEYS and _milli(k, used.get(k, "0")) + usage[k] > _milli(k, hard[k])
            ]  # fmt: skip
            if over:
                req = ",".join(f"{k}={_fmt(k, usage[k])}" for k in sorted(over))
                use = ",".join(f"{k}={used.get(k, '0')}" for k in sorted(over))
                lim = ",".join(f"{k}={hard[k]}" for k in sorted(over))
                raise Forbidden.for_object(
                    "pods",
                    "",
                    name,
                    f"exceeded quota: {qname}, requested: {req}, used: {use}, limited: {lim}",
                )

    def _refresh_quotas(self, namespace: str) -> None:
        rt = self.core.registry.get("", "v1", "resourcequotas")
        assert rt is not None
        for quota in self._quotas(namespace):
            hard = (quota.get("spec") or {}).get("hard") or {}
            used = self._quota_used(namespace, hard)
            if (quota.get("status") or {}).get("used") != used:
                new = dict(quota, status={"hard": dict(hard), "used": used})
                new["metadata"] = dict(quota["metadata"])
                self.core.write(rt, new, quota)

    # --- services ----------------------------------------------------------------------
    def _default_service(self, svc: Obj, old: Obj | None = None) -> None:
        spec = svc.setdefault("spec", {})
        spec.setdefault("type", "ClusterIP")
        spec.setdefault("sessionAffinity", "None")
        old_ip = ((old or {}).get("spec") or {}).get("clusterIP")
        if old_ip:
            if spec.get("clusterIP") not in (None, "", old_ip):
                raise Invalid.for_object(
                    "Service",
                    "",
                    svc["metadata"]["name"],
                    [
                        (
                            "FieldValueInvalid",
                            "spec.clusterIPs[0]",
                            "Invalid value: field is immutable",
                        )
                    ],
                )
            spec["clusterIP"] = old_ip
        elif spec.get("clusterIP") != "None" and not spec.get("clusterIP"):
            spec["clusterIP"] = str(ipaddress.IPv4Address(self._next_ip))
            self._next_ip += 1
        spec["clusterIPs"] = [spec["clusterIP"]]
        spec.setdefault("ipFamilies", ["IPv4"])
        spec.setdefault("ipFamilyPolicy", "SingleStack")
        spec.setdefault("internalTrafficPolicy", "Cluster")
        for p in spec.get("ports") or []:
            p.setdefault("protocol", "TCP")
            p.setdefault("targetPort", p.get("port"))
        svc.setdefault("status", {"loadBalancer": {}})

    # --- CRDs --------------------------------------------------------------------------
    def _create_crd(self, rt: ResourceType, crd: Obj) -> None:
        spec = crd.get("spec") or {}
        names = spec.get("names") or {}
        expected = f"{names.get('plural', '')}.{spec.get('group', '')}"
        if crd["metadata"]["name"] != expected:
            raise Invalid.for_object(
                rt.kind, rt.group, crd["metadata"]["name"],
                [("FieldValueInvalid", "metadata.name", f'Invalid value: "{crd["metadata"]["name"]}": must be spec.names.plural+"."+spec.group')],  # noqa: E501
            )  # fmt: skip
        for rtype in self.core.registry.register_crd(crd):
            if rtype.key != f"{spec['group']}/{names['plural']}":
                raise Conflict.for_object(
                    rt.plural, rt.group, crd["metadata"]["name"], "inconsistent names"
                )
        ts = rfc3339()
        conditions = [
            ("NamesAccepted", "NoConflicts", "no conflicts found"),
            ("Established", "InitialNamesAccepted", "the initial names have been accepted"),
        ]
        crd["status"] = {
            "conditions": [
                {"type": t, "status": "True", "reason": r, "message": m, "lastTransitionTime": ts}
                for t, r, m in conditions
            ],
            "acceptedNames": names,
            "storedVersions": [v["name"] for v in spec.get("versions") or [] if v.get("storage")],
        }

    def _remove_crd(self, crd: Obj) -> None:
        spec = crd.get("spec") or {}
        plural, group = (spec.get("names") or {}).get("plural", ""), spec.get("group", "")
        key = f"{group}/{plural}"
        for obj in list(self.core.store.iter(key)):
            self.core.store.remove(key, obj)
        self.core.registry.remove_group_resource(group, plural)

    def require_type(self, group: str, version: str, plural: str) -> ResourceType:
        rt = self.core.registry.get(group, version, plural)
        if rt is None:
            raise NotFound("the server could not find the requested resource")
        return rt
