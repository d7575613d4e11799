"""Server-side apply through the real kubectl: managedFields, conflicts between managers in
upstream's words, ``--force-conflicts``, fields a manager stops applying, updates taking
ownership, ``before-first-apply`` for objects created without it, list-maps by key."""

from __future__ import annotations

from typing import Any

from tests.support.kubectl import Kubectl

CM = """apiVersion: v1
kind: ConfigMap
metadata: {name: cm1, namespace: default}
data: {a: "1", b: "2"}
"""
POD = """apiVersion: v1
kind: Pod
metadata: {name: p1, namespace: default}
spec:
  containers:
  - {name: c, image: "nginx:1.25", env: [{name: A, value: "1"}]}
"""


def _apply(kubectl: Kubectl, manifest: str, *flags: str, check: bool = True) -> Any:
    return kubectl.run("apply", "--server-side", *flags, "-f", "-", stdin=manifest, check=check)


def _managers(kubectl: Kubectl, *what: str) -> dict[str, Any]:
    obj = kubectl.json("-n", "default", "get", *what, "--show-managed-fields")
    return {e["manager"]: e for e in obj["metadata"]["managedFields"]}


def test_conflicts_between_managers_and_force(kubectl: Kubectl) -> None:
    assert "configmap/cm1 serverside-applied" in _apply(kubectl, CM).stdout
    rv = kubectl.json("-n", "default", "get", "cm", "cm1")["metadata"]["resourceVersion"]
    _apply(kubectl, CM)  # the same configuration again: nothing written
    assert kubectl.json("-n", "default", "get", "cm", "cm1")["metadata"]["resourceVersion"] == rv
    mine = _managers(kubectl, "cm", "cm1")["kubectl"]
    assert (mine["operation"], mine["fieldsType"]) == ("Apply", "FieldsV1")
    assert mine["fieldsV1"] == {"f:data": {"f:a": {}, "f:b": {}}}
    theirs = CM.replace('a: "1"', 'a: "9"')
    refused = _apply(kubectl, theirs, "--field-manager", "other", check=False)
    assert refused.returncode != 0
    assert 'Apply failed with 1 conflict: conflict with "kubectl": .data.a' in refused.stderr
    _apply(kubectl, theirs, "--field-manager", "other", "--force-conflicts")
    assert kubectl.json("-n", "default", "get", "cm", "cm1")["data"] == {"a": "9", "b": "2"}
    managers = _managers(kubectl, "cm", "cm1")
    assert managers["kubectl"]["fieldsV1"] == {"f:data": {"f:b": {}}}  # a moved to "other"
    assert managers["other"]["fieldsV1"] == {"f:data": {"f:a": {}, "f:b": {}}}


def test_fields_a_manager_stops_applying_go_unless_another_owns_them(kubectl: Kubectl) -> None:
    _apply(kubectl, CM.replace('b: "2"', 'b: "2", c: "3"'))
    _apply(kubectl, CM.replace('a: "1", b: "2"', 'b: "2"'), "--field-manager", "other")
    _apply(kubectl, CM.replace('a: "1", b: "2"', 'a: "1"'))  # kubectl drops b and c
    # c was kubectl's alone: gone; b is still other's: kept
    assert kubectl.json("-n", "default", "get", "cm", "cm1")["data"] == {"a": "1", "b": "2"}


def test_an_update_takes_ownership_of_what_it_changed(kubectl: Kubectl) -> None:
    _apply(kubectl, CM)
    kubectl.run(
        "-n", "default", "patch", "cm", "cm1", "--type", "merge", "-p", '{"data":{"a":"5"}}'
    )
    patcher = _managers(kubectl, "cm", "cm1")["kubectl-patch"]
    assert (patcher["operation"], patcher["fieldsV1"]) == ("Update", {"f:data": {"f:a": {}}})
    refused = _apply(kubectl, CM, check=False)
    assert 'conflict with "kubectl-patch" using v1 at ' in refused.stderr
    assert refused.stderr.split("\n")[0].endswith(": .data.a")


def test_an_object_created_without_apply_is_owned_before_first_apply(kubectl: Kubectl) -> None:
    kubectl.run("create", "-f", "-", stdin=CM)
    refused = _apply(kubectl, CM.replace('b: "2"', 'b: "7"'), check=False)
    assert 'conflict with "before-first-apply" using v1: .data.b' in refused.stderr
    _apply(kubectl, CM)  # the same values: shared, no conflict


def test_list_maps_by_key_and_pod_rules(kubectl: Kubectl) -> None:
    _apply(kubectl, POD)
    fields = _managers(kubectl, "pod", "p1")["kubectl"]["fieldsV1"]
    item = fields["f:spec"]["f:containers"]['k:{"name":"c"}']
    assert item["."] == {} and item["f:image"] == {}
    newer = POD.replace("nginx:1.25", "nginx:1.26")
    refused = _apply(kubectl, newer, "--field-manager", "other", check=False)
    assert '.spec.containers[name="c"].image' in refused.stderr
    _apply(kubectl, newer, "--field-manager", "other", "--force-conflicts")
    pod = kubectl.json("-n", "default", "get", "pod", "p1")
    assert pod["spec"]["containers"][0]["image"] == "nginx:1.26"
    env2 = 'env: [{name: A, value: "1"}, {name: B, value: "2"}]'
    changed = POD.replace('env: [{name: A, value: "1"}]', env2).replace("1.25", "1.26")
    refused = _apply(kubectl, changed, "--force-conflicts", check=False)
    assert "pod updates may not change fields" in refused.stderr
