"""The API core's structure: per-kind strategies from a table, the generic strategy for every
other kind, and the garbage collector fed by store events.

These drive an ``ApiCore`` directly (no HTTP): with no event loop running, deferred work
(garbage collection, namespace purges) runs at once, so the synchronous tests need no
waiting; the async test checks the deferral itself and waits for the collection.
"""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from simcluster.apiserver.core import ApiCore
from simcluster.apiserver.kinds.namespaces import NamespaceStrategy
from simcluster.apiserver.kinds.pods import PodStrategy
from simcluster.apiserver.kinds.rbac import RbacStrategy
from simcluster.apiserver.resources import Registry, ResourceType
from simcluster.apiserver.store import Event, Store
from simcluster.apiserver.strategies import STRATEGIES
from simcluster.apiserver.strategy import Strategy, StrategyContext
from simcluster.errors import Invalid, MethodNotAllowed, NotFound

Obj = dict[str, Any]
CONFIGMAPS = "/configmaps"
MERGE = "application/merge-patch+json"


class Recording(Strategy):
    """Records each hook call; refuses a create whose data says so (a validation rule)."""

    def __init__(self, ctx: StrategyContext) -> None:
        self.calls: list[str] = []

    def validate_name(self, rt: ResourceType, name: str) -> None:
        self.calls.append("validate_name")

    def prepare_create(self, rt: ResourceType, obj: Obj) -> None:
        self.calls.append("prepare_create")
        obj["metadata"].setdefault("annotations", {})["prepared"] = "yes"

    def validate_create(self, rt: ResourceType, obj: Obj) -> None:
        self.calls.append("validate_create")
        if (obj.get("data") or {}).get("refuse"):
            raise Invalid.for_object(rt.kind, rt.group, obj["metadata"]["name"], [])

    def after_create(self, rt: ResourceType, obj: Obj) -> None:
        self.calls.append("after_create")

    def prepare_update(self, rt: ResourceType, new: Obj, old: Obj, subresource: str) -> None:
        self.calls.append("prepare_update")

    def validate_update(self, rt: ResourceType, new: Obj, old: Obj, subresource: str) -> None:
        self.calls.append("validate_update")

    def grace_period(self, rt: ResourceType, obj: Obj, requested: Any) -> int:
        self.calls.append("grace_period")
        return 0

    def after_remove(self, rt: ResourceType, obj: Obj) -> None:
        self.calls.append("after_remove")


def _core(strategies: Any = STRATEGIES) -> ApiCore:
    core = ApiCore(Registry.builtin(), Store(), strategies=strategies)
    core.create(_rt(core, "namespaces"), "", {"metadata": {"name": "default"}})
    return core


def _rt(core: ApiCore, plural: str, group: str = "", version: str = "v1") -> ResourceType:
    rt = core.registry.get(group, version, plural)
    assert rt is not None
    return rt


def _cm(name: str, owner: Obj | None = None) -> Obj:
    meta: Obj = {"name": name}
    if owner is not None:
        ref = {"apiVersion": "v1", "kind": "ConfigMap", "name": owner["metadata"]["name"]}
        meta["ownerReferences"] = [{**ref, "uid": owner["metadata"]["uid"]}]
    return {"metadata": meta, "data": {}}


def test_the_table_gives_kinds_with_rules_their_strategy_and_others_the_generic_one() -> None:
    core = _core()
    assert isinstance(core.strategies.for_key("/pods"), PodStrategy)
    assert isinstance(core.strategies.for_key("/namespaces"), NamespaceStrategy)
    assert isinstance(core.strategies.for_key("rbac.authorization.k8s.io/roles"), RbacStrategy)
    generic = core.strategies.for_key("/endpoints")
    assert type(generic) is Strategy
    assert core.strategies.for_key("discovery.k8s.io/endpointslices") is generic


def test_a_registered_strategy_gets_its_hooks_called_in_verb_order() -> None:
    core = _core({**STRATEGIES, CONFIGMAPS: Recording})
    cms = _rt(core, "configmaps")
    recording = core.strategies.for_key(CONFIGMAPS)
    assert isinstance(recording, Recording)

    created = core.create(cms, "default", _cm("a"))
    assert created["metadata"]["annotations"] == {"prepared": "yes"}
    assert core.get(cms, "default", "a")["metadata"]["annotations"] == {"prepared": "yes"}
    assert recording.calls == ["validate_name", "prepare_create", "validate_create", "after_create"]

    recording.calls.clear()
    core.patch(cms, "default", "a", MERGE, {"data": {"k": "v"}})
    assert recording.calls == ["prepare_update", "validate_update"]

    recording.calls.clear()
    core.delete(cms, "default", "a", None)
    assert recording.calls == ["grace_period", "after_remove"]
    with pytest.raises(NotFound):
        core.get(cms, "default", "a")


def test_a_validation_hook_refuses_and_nothing_is_stored() -> None:
    core = _core({**STRATEGIES, CONFIGMAPS: Recording})
    cms = _rt(core, "configmaps")
    recording = core.strategies.for_key(CONFIGMAPS)
    assert isinstance(recording, Recording)
    rv = core.store.rv
    with pytest.raises(Invalid):
        core.create(cms, "default", {"metadata": {"name": "b"}, "data": {"refuse": "1"}})
    assert "after_create" not in recording.calls
    assert core.store.get(CONFIGMAPS, "default", "b") is None
    assert core.store.rv == rv


def test_a_kind_without_a_strategy_gets_the_generic_behaviour() -> None:
    core = _core()
    cms, namespaces = _rt(core, "configmaps"), _rt(core, "namespaces")
    # generic name rule: an RFC 1123 subdomain (dots allowed); namespaces take a label
    core.create(cms, "default", _cm("with.dots"))
    with pytest.raises(Invalid):
        core.create(namespaces, "", {"metadata": {"name": "with.dots"}})
    # generic grace period: removed at once, no terminating phase
    deleted = core.delete(cms, "default", "with.dots", None)
    assert "deletionTimestamp" not in deleted["metadata"]
    assert core.store.get(CONFIGMAPS, "default", "with.dots") is None
    # generic subresources: none to POST to
    with pytest.raises(MethodNotAllowed):
        core.create_subresource(cms, "binding", "default", "x", {})


def test_the_rbac_strategy_allows_path_segment_names_the_generic_one_refuses() -> None:
    core = _core()
    roles = _rt(core, "clusterroles", "rbac.authorization.k8s.io")
    core.create(roles, "", {"metadata": {"name": "system:controller:foo"}})
    with pytest.raises(Invalid):
        core.create(_rt(core, "configmaps"), "default", _cm("system:controller:foo"))


def test_kinds_with_rules_still_apply_them_through_the_table() -> None:
    """One behaviour per strategy class, seen through the verbs."""
    core = _core()
    sa = core.store.get("/serviceaccounts", "default", "default")
    assert sa is not None  # the namespace strategy's after_create
    svc = core.create(_rt(core, "services"), "default", {"metadata": {"name": "s"}, "spec": {}})
    assert svc["spec"]["clusterIP"] == "10.96.0.10"  # the service strategy's allocator
    token = core.create_subresource(_rt(core, "serviceaccounts"), "token", "default", "default", {})
    assert core.auth.authenticate(f"Bearer {token['status']['token']}") is not None


def test_store_listeners_get_every_event_in_order_after_the_watchers() -> None:
    store = Store()
    seen: list[tuple[str, str]] = []

    def listener(event: Event) -> None:
        seen.append((event.type, event.obj["metadata"]["name"]))

    store.add_listener(listener)
    obj: Obj = {"metadata": {"name": "a", "namespace": "n", "resourceVersion": "1"}}
    store.put("/configmaps", obj, None)
    new = {"metadata": dict(obj["metadata"], resourceVersion="2")}
    store.put("/configmaps", new, obj)
    store.remove("/configmaps", new)
    assert seen == [("ADDED", "a"), ("MODIFIED", "a"), ("DELETED", "a")]
    store.remove_listener(listener)
    store.put("/configmaps", obj, None)
    assert len(seen) == 3


def test_gc_deletes_dependents_when_the_owner_leaves_the_store_however_it_left() -> None:
    """The owner is removed from the store directly, as a namespace purge does: no verb,
    no strategy hook; the collector still sees it, through the store's event."""
    core = _core()
    cms = _rt(core, "configmaps")
    owner = core.create(cms, "default", _cm("owner"))
    core.create(cms, "default", _cm("dependent", owner))
    core.create(cms, "default", _cm("bystander"))
    core.store.remove(CONFIGMAPS, owner)
    assert core.store.get(CONFIGMAPS, "default", "dependent") is None
    assert core.store.get(CONFIGMAPS, "default", "bystander") is not None


def test_gc_orphans_dependents_when_asked() -> None:
    core = _core()
    cms = _rt(core, "configmaps")
    owner = core.create(cms, "default", _cm("owner"))
    core.create(cms, "default", _cm("dependent", owner))
    core.delete(cms, "default", "owner", {"propagationPolicy": "Orphan"})
    kept = core.store.get(CONFIGMAPS, "default", "dependent")
    assert kept is not None
    assert not kept["metadata"].get("ownerReferences")


def test_gc_forgets_a_dependent_whose_owner_reference_was_removed() -> None:
    core = _core()
    cms = _rt(core, "configmaps")
    owner = core.create(cms, "default", _cm("owner"))
    core.create(cms, "default", _cm("dependent", owner))
    core.patch(cms, "default", "dependent", MERGE, {"metadata": {"ownerReferences": None}})
    core.delete(cms, "default", "owner", None)
    assert core.store.get(CONFIGMAPS, "default", "dependent") is not None


@pytest.mark.anyio
async def test_gc_collects_on_the_next_loop_turn_not_inside_the_delete() -> None:
    core = _core()
    cms = _rt(core, "configmaps")
    owner = core.create(cms, "default", _cm("owner"))
    core.create(cms, "default", _cm("dependent", owner))
    gone = anyio.Event()
    order: list[str] = []

    def listener(event: Event) -> None:
        if event.type == "DELETED":
            order.append(event.obj["metadata"]["name"])
            if event.obj["metadata"]["name"] == "dependent":
                gone.set()

    core.store.add_listener(listener)
    core.delete(cms, "default", "owner", None)
    assert core.store.get(CONFIGMAPS, "default", "dependent") is not None  # not yet
    with anyio.fail_after(5):
        await gone.wait()
    assert order == ["owner", "dependent"]
    assert core.store.get(CONFIGMAPS, "default", "dependent") is None
