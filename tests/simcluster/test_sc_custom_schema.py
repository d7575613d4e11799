"""Custom resources held to their CRD's schema (simcluster/apiserver/kinds/custom.py): the
ImagePreparation CRD as shipped (manifests/crds/), through the API core.

Checked: what the facade writes (announced sandboxes included: ``sandboxes``, ``class``, the
pool pods' ``podTemplate``) is stored whole; a field the CRD does not declare (or a null
it does not allow) is pruned as upstream prunes it; a value of the wrong type or outside its
bounds is a 422 naming the field; the status subresource keeps whatever the controller
reports (preserved)."""

from __future__ import annotations

from typing import Any

import pytest

from devstack.crds import image_preparation_crd
from simcluster.apiserver.core import ApiCore
from simcluster.apiserver.kinds.custom import CustomResourceStrategy
from simcluster.apiserver.resources import Registry, ResourceType
from simcluster.apiserver.store import Store
from simcluster.errors import Invalid

Obj = dict[str, Any]
MERGE = "application/merge-patch+json"


def _core() -> tuple[ApiCore, ResourceType]:
    core = ApiCore(Registry.builtin(), Store())
    core.create(core.registry.get("", "v1", "namespaces"), "", {"metadata": {"name": "ns"}})  # type: ignore[arg-type]
    crds = core.registry.get("apiextensions.k8s.io", "v1", "customresourcedefinitions")
    assert crds is not None
    core.create(crds, "", image_preparation_crd())
    rt = core.registry.get("sandman.io", "v1alpha1", "imagepreparations")
    assert rt is not None
    return core, rt


def _prep(name: str, **spec: Any) -> Obj:
    body = {"images": [{"image": "r.local/a:1", "count": 2}], **spec}
    return {"apiVersion": "sandman.io/v1alpha1", "kind": "ImagePreparation",
            "metadata": {"name": name}, "spec": body}  # fmt: skip


def test_announced_sandboxes_are_stored_whole_and_undeclared_fields_pruned() -> None:
    core, rt = _core()
    assert isinstance(core.strategies.for_key(rt.key), CustomResourceStrategy)
    template = {"metadata": {"labels": {"a": "b"}}, "spec": {"containers": [{"name": "x"}]}}
    obj = _prep("p1", sandboxes=True, podTemplate=template, nope=1, deadline=None)
    obj["spec"]["class"] = "tiny"
    obj["spec"]["images"][0]["extra"] = "dropped"
    obj["other"] = {"dropped": True}
    stored = core.create(rt, "ns", obj)
    assert stored["spec"] == {
        "images": [{"image": "r.local/a:1", "count": 2}],
        "sandboxes": True,
        "class": "tiny",
        "podTemplate": template,  # preserved whole, unknown fields and all
    }
    assert "other" not in stored
    patched = core.patch(
        rt,
        "ns",
        "p1",
        MERGE,
        {"status": {"phase": "Ready", "pool": {"ready": 2}}},
        subresource="status",
    )
    assert patched["status"] == {"phase": "Ready", "pool": {"ready": 2}}


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        ({"sandboxes": "yes"}, "spec.sandboxes"),
        ({"class": ""}, "spec.class"),
        ({"podTemplate": []}, "spec.podTemplate"),
        ({"images": []}, "spec.images"),
        ({"images": [{"image": "r.local/a:1", "count": 0}]}, "spec.images[0].count"),
        ({"images": [{"count": 1}]}, "spec.images[0].image"),
        ({"deadline": 5}, "spec.deadline"),
    ],
)
def test_values_the_schema_refuses_are_a_422_naming_the_field(spec: Obj, field: str) -> None:
    core, rt = _core()
    with pytest.raises(Invalid) as refused:
        core.create(rt, "ns", _prep("p2", **spec))
    assert f"{field}:" in str(refused.value), str(refused.value)
    core.create(rt, "ns", _prep("p3"))
    with pytest.raises(Invalid):  # an update is held to it too
        core.patch(rt, "ns", "p3", MERGE, {"spec": spec})
