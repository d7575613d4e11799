"""What every verb of ``ApiCore`` stands on: its state and the checks common to all of them.

The verbs are split by what they do to the store (``read_verbs``, ``write_verbs``,
``delete_verbs``), but each of them resolves an object, checks a request body against the
resource type, stores under the next resourceVersion or removes through the kind's strategy
in the same way. Those few helpers, and the attributes ``ApiCore`` builds, are declared once
here so that each verb module types against one base; ``core`` alone assembles them (only
``delete_verbs`` stands on ``read_verbs``, as deletecollection deletes what a list finds).
"""

from __future__ import annotations

from typing import Any

import msgspec

from simcluster.apiserver.auth import Authenticator
from simcluster.apiserver.gc import GarbageCollector
from simcluster.apiserver.meta import IdSource
from simcluster.apiserver.resources import Registry, ResourceType
from simcluster.apiserver.store import Store
from simcluster.apiserver.strategies import Strategies
from simcluster.errors import BadRequest, Forbidden, NotFound

__all__ = ["CoreBase", "Obj", "copy_object", "sort_key"]

Obj = dict[str, Any]


def copy_object(obj: Obj) -> Obj:
    """A deep copy, as the JSON round trip a stored object survives."""
    return msgspec.json.decode(msgspec.json.encode(obj))


def sort_key(o: Obj) -> str:
    """The order of a list, a watch's initial events and a continue token: namespace/name."""
    m = o["metadata"]
    return f"{m.get('namespace', '')}/{m['name']}"


class CoreBase:
    """The state ``ApiCore.__init__`` builds and the helpers every verb calls."""

    registry: Registry
    store: Store
    ids: IdSource
    auth: Authenticator
    gc: GarbageCollector
    strategies: Strategies

    def _require_namespace(self, rt: ResourceType, namespace: str, creating: bool) -> None:
        if not rt.namespaced:
            return
        ns = self.store.get("/namespaces", "", namespace)
        if ns is None:
            raise NotFound.for_object("namespaces", "", namespace)
        if creating and ns["metadata"].get("deletionTimestamp"):
            err = Forbidden.for_object(
                rt.plural,
                rt.group,
                "",
                f"unable to create new content in namespace {namespace} because it is being terminated",  # noqa: E501
            )
            assert err.details is not None  # the NamespaceLifecycle plugin's cause
            err.details["causes"] = [
                {
                    "reason": "NamespaceTerminating",
                    "message": f"namespace {namespace} is being terminated",
                    "field": "metadata.namespace",
                }
            ]
            raise err

    def _check_body(self, rt: ResourceType, namespace: str, body: Any) -> Obj:
        if not isinstance(body, dict):
            raise BadRequest("the body of the request must be a JSON object")
        api_version, kind = body.get("apiVersion"), body.get("kind")
        if api_version and api_version != rt.api_version:
            raise BadRequest(
                f"the API version in the data ({api_version}) does not match the expected API version ({rt.api_version})"  # noqa: E501
            )
        if kind and kind != rt.kind:
            raise BadRequest(
                f"the kind in the data ({kind}) does not match the expected kind ({rt.kind})"
            )
        meta = body.setdefault("metadata", {})
        if not isinstance(meta, dict):
            raise BadRequest("metadata must be an object")
        if rt.namespaced:
            if meta.get("namespace") and meta["namespace"] != namespace:
                raise BadRequest(
                    "the namespace of the provided object does not match the namespace sent on the request"  # noqa: E501
                )
            meta["namespace"] = namespace
        else:
            meta.pop("namespace", None)
        body["apiVersion"], body["kind"] = rt.api_version, rt.kind
        meta.pop("managedFields", None)
        meta.pop("selfLink", None)
        return body

    def lookup(self, rt: ResourceType, namespace: str, name: str) -> Obj:
        obj = self.store.get(rt.key, namespace if rt.namespaced else "", name)
        if obj is None:
            raise NotFound.for_object(rt.plural, rt.group, name)
        return obj

    def write(self, rt: ResourceType, obj: Obj, old: Obj | None) -> Obj:
        """Store ``obj`` (replacing ``old``) under the next resourceVersion, as is: the
        caller has applied the verb's rules (``Writer.write``)."""
        obj["metadata"]["resourceVersion"] = str(self.store.next_rv())
        self.store.put(rt.key, obj, old)
        return obj

    def _remove(self, rt: ResourceType, obj: Obj) -> Obj:
        event = self.store.remove(rt.key, obj)
        self.strategies.for_key(rt.key).after_remove(rt, event.obj)
        return event.obj
