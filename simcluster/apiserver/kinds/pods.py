"""The pod strategy: defaults, quota admission, update rules, graceful deletion, binding.

The rules themselves are pure functions in ``simcluster.apiserver.pods`` (the kubelet reads
pod requests from there too); this class is where the verbs meet them, and where a pod's
arrival or departure refreshes its namespace's quota usage.
"""

from __future__ import annotations

from typing import Any

from simcluster.apiserver import pods, podsecurity
from simcluster.apiserver.kinds.quotas import QuotaLedger
from simcluster.apiserver.resources import ResourceType
from simcluster.apiserver.strategy import Strategy, StrategyContext
from simcluster.apiserver.validation.fields import Cause
from simcluster.apiserver.validation.podspec import pod_spec_causes
from simcluster.errors import BadRequest, Forbidden

__all__ = ["PodStrategy"]

Obj = dict[str, Any]
NAMESPACES = "/namespaces"
_BOUND = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}


class PodStrategy(Strategy):
    graceful_delete = True

    def __init__(self, ctx: StrategyContext) -> None:
        self.writer = ctx.writer
        self.objects = ctx.objects
        self.exempt_runtime_classes = frozenset(ctx.exempt_runtime_classes)
        self.quota = QuotaLedger(ctx.objects, ctx.writer, ctx.registry)

    def prepare_create(self, rt: ResourceType, obj: Obj) -> None:
        pods.default_pod(obj)

    def create_causes(self, rt: ResourceType, obj: Obj) -> list[Cause]:
        return pod_spec_causes(obj.get("spec"))

    def validate_create(self, rt: ResourceType, obj: Obj) -> None:
        """Validation first, then the validating admission plugins, which upstream runs
        after the strategy's ``Validate`` (a bad pod is 422, not 403): PodSecurity, then
        ResourceQuota, in upstream's plugin order."""
        super().validate_create(rt, obj)
        self.admit_pod_security(obj)
        self.quota.admit(obj)

    def validate_update(self, rt: ResourceType, new: Obj, old: Obj, subresource: str) -> None:
        super().validate_update(rt, new, old, subresource)
        if not subresource and podsecurity.significant_update(new, old):
            self.admit_pod_security(new)

    def admit_pod_security(self, pod: Obj) -> None:
        """403 for a pod its namespace's `enforce` level forbids (``podsecurity``), unless
        its RuntimeClass is exempt by configuration."""
        if pod["spec"].get("runtimeClassName") in self.exempt_runtime_classes:
            return
        namespace = self.objects.get(NAMESPACES, "", pod["metadata"]["namespace"]) or {}
        policy = podsecurity.policy_of((namespace.get("metadata") or {}).get("labels"))
        why = podsecurity.refusal(policy, pod)
        if why is not None:
            raise Forbidden.for_object("pods", "", pod["metadata"]["name"], why)

    def after_create(self, rt: ResourceType, obj: Obj) -> None:
        self.quota.refresh(obj["metadata"]["namespace"])

    def prepare_update(self, rt: ResourceType, new: Obj, old: Obj, subresource: str) -> None:
        if not subresource:
            pods.check_update(new, old)

    def grace_period(self, rt: ResourceType, obj: Obj, requested: Any) -> int:
        return pods.pod_grace(obj, requested)

    def after_remove(self, rt: ResourceType, obj: Obj) -> None:
        self.quota.refresh(obj["metadata"]["namespace"])

    def create_subresource(
        self, rt: ResourceType, subresource: str, namespace: str, name: str, body: Any
    ) -> Obj:
        if subresource != "binding":
            return super().create_subresource(rt, subresource, namespace, name, body)
        return self.bind(rt, namespace, name, body)

    def bind(self, rt: ResourceType, namespace: str, name: str, binding: Any) -> Obj:
        """pods/binding (and the legacy ``bindings`` resource): upstream's ``BindingREST``."""
        if not isinstance(binding, dict):
            binding = {}
        bname = (binding.get("metadata") or {}).get("name") or ""
        if not name:
            raise BadRequest("resource name may not be empty")
        if bname != name:
            raise BadRequest("name in URL does not match name in Binding object")
        pods.validate_binding(binding, name)
        pod = self.writer.lookup(rt, namespace, name)
        self.writer.write(rt, pods.bind(pod, binding), pod)
        return dict(_BOUND)
