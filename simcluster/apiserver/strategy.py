"""The per-kind strategy: the extension points the generic verbs call for one kind.

Upstream's registry gives every resource a strategy (``PrepareForCreate``, ``Validate``,
``PrepareForUpdate``, ``CheckGracefulDelete``...) and the admission chain adds more rules.
Here each kind with rules has one small ``Strategy`` subclass that overrides only the hooks
it needs, in the style of kube-scheduler's plugin framework: every hook has a no-op default,
so a kind without rules is served by the base class itself (the generic strategy), and a
new rule is a method on one kind's class, not another branch in a switch over every kind.

The order the core calls the hooks in, per verb:

- create: ``validate_name`` → ``prepare_create`` (defaults, server-set fields) →
  ``validate_create`` → store → ``after_create`` (follow-up writes, e.g. a namespace's
  default service account);
- update/patch: merge → ``prepare_update`` → ``validate_update`` → store (or remove, when a
  terminating object lost its last finalizer);
- delete: ``grace_period`` → removed at once when 0 and no finalizers, else
  ``prepare_delete`` and stored as terminating → ``after_mark_deleting`` (follow-ups, not
  on dry runs, which answer what ``prepare_delete`` made); every removal → ``after_remove``;
- POST to a subresource the kind serves (pods/binding, serviceaccounts/token):
  ``create_subresource``.

``validate_create``/``validate_update`` are upstream's ``Validate``/``ValidateUpdate``: the
base class checks the object's metadata (``validation.objectmeta``) and adds the causes of
``create_causes``/``update_causes``, which a kind overrides with its own rules; every cause
found goes into one 422, as upstream's ``NewInvalid`` reports a whole ``field.ErrorList``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from simcluster.apiserver import meta
from simcluster.apiserver.auth import Authenticator
from simcluster.apiserver.resources import Registry, ResourceType
from simcluster.apiserver.validation.fields import Cause
from simcluster.apiserver.validation.objectmeta import meta_causes, meta_update_causes
from simcluster.apiserver.writer import Objects, Writer
from simcluster.errors import Invalid, MethodNotAllowed

__all__ = ["Strategy", "StrategyContext", "invalid", "required"]

Obj = dict[str, Any]


@dataclass(frozen=True, slots=True)
class StrategyContext:
    """What a strategy may use, built once by the core; each kind keeps what it needs."""

    writer: Writer
    objects: Objects
    registry: Registry
    auth: Authenticator
    #: Pod Security admission's exempt RuntimeClasses (``ServerSettings``)
    exempt_runtime_classes: tuple[str, ...] = ()


class Strategy:
    """The generic strategy: every hook a no-op. Subclasses override what their kind needs."""

    #: upstream's ``RESTGracefulDeleteStrategy``: even a deletion at grace 0 is first written
    #: with its deletionTimestamp (a MODIFIED event) before the object goes
    graceful_delete = False

    def __init__(self, ctx: StrategyContext) -> None:
        """Take from ``ctx`` what the kind needs; the generic strategy needs nothing."""

    # --- create ------------------------------------------------------------------------
    def validate_name(self, rt: ResourceType, name: str) -> None:
        """``metadata.name``'s rule, checked before anything else about a new object; most
        kinds take an RFC 1123 subdomain (upstream's ``NameIsDNSSubdomain``)."""
        meta.validate_name(rt.kind, rt.group, name, dns_label=False)

    def prepare_create(self, rt: ResourceType, obj: Obj) -> None:
        """Default the new object and set server-owned fields (status, allocated values)."""

    def validate_create(self, rt: ResourceType, obj: Obj) -> None:
        """Raise ``Invalid`` for an object the real server refuses to create."""
        causes = meta_causes(obj["metadata"]) + self.create_causes(rt, obj)
        if causes:
            raise Invalid.for_object(rt.kind, rt.group, obj["metadata"]["name"], causes)

    def create_causes(self, rt: ResourceType, obj: Obj) -> list[Cause]:
        """The kind's own rules for a new object (its metadata is checked already)."""
        return []

    def after_create(self, rt: ResourceType, obj: Obj) -> None:
        """Follow-up writes once the object is stored (not called on dry runs)."""

    # --- update ------------------------------------------------------------------------
    def prepare_update(self, rt: ResourceType, new: Obj, old: Obj, subresource: str) -> None:
        """Restore or re-default fields the client may not change (``subresource`` is "",
        "status" or "finalize")."""

    def validate_update(self, rt: ResourceType, new: Obj, old: Obj, subresource: str) -> None:
        """Raise ``Invalid`` for an update the real server refuses."""
        causes = meta_update_causes(new["metadata"], old["metadata"])
        causes += self.update_causes(rt, new, old, subresource)
        if causes:
            raise Invalid.for_object(rt.kind, rt.group, new["metadata"]["name"], causes)

    def update_causes(self, rt: ResourceType, new: Obj, old: Obj, subresource: str) -> list[Cause]:
        """The kind's own rules for an update: by default the create rules on the new
        object, unless only a subresource (status) changes."""
        return [] if subresource else self.create_causes(rt, new)

    # --- delete ------------------------------------------------------------------------
    def grace_period(self, rt: ResourceType, obj: Obj, requested: Any) -> int:
        """Seconds the object stays terminating; 0 removes it at once (no finalizers)."""
        return 0

    def prepare_delete(self, rt: ResourceType, obj: Obj) -> None:
        """Adjust an object about to be stored as terminating (deletionTimestamp set); no
        side effects: a dry run answers what this makes and stores nothing."""

    def after_mark_deleting(self, rt: ResourceType, obj: Obj) -> None:
        """Follow-ups once the object is stored as terminating (not called on dry runs)."""

    def after_remove(self, rt: ResourceType, obj: Obj) -> None:
        """Follow-ups once the object is gone from the store."""

    # --- subresources ------------------------------------------------------------------
    def create_subresource(
        self, rt: ResourceType, subresource: str, namespace: str, name: str, body: Any
    ) -> Obj:
        """POST to ``<name>/<subresource>``; kinds without such a subresource refuse it."""
        raise MethodNotAllowed("the server does not allow this method on the requested resource")


def invalid(rt: ResourceType, name: str, field: str, msg: str) -> Invalid:
    """A 422 for one field, worded as upstream's ``field.Invalid``."""
    return Invalid.for_object(
        rt.kind, rt.group, name, [("FieldValueInvalid", field, f"Invalid value: {msg}")]
    )


def required(rt: ResourceType, name: str, field: str, msg: str) -> Invalid:
    """A 422 for one missing field, worded as upstream's ``field.Required``."""
    return Invalid.for_object(
        rt.kind, rt.group, name, [("FieldValueRequired", field, f"Required value: {msg}")]
    )
