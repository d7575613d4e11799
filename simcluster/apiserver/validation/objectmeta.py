"""``ValidateObjectMeta`` and ``ValidateObjectMetaUpdate``: the rules every kind's metadata
follows (the name's rule is the kind's, checked earlier by ``Strategy.validate_name``).

Labels: qualified-name keys and label values. Annotations: qualified-name keys (checked
lower-cased, as upstream) and 256 KiB in total. Finalizers: qualified names, or one of the
standard unqualified ones. ownerReferences: apiVersion, kind, name and uid all required, at
most one controller. On update: no new finalizers once the object is being deleted.
"""

from __future__ import annotations

from typing import Any

from simcluster.apiserver.validation.fields import (
    Cause,
    forbidden,
    invalid,
    invalids,
    label_value,
    qualified_name,
    too_long,
)

__all__ = ["ANNOTATIONS_LIMIT", "meta_causes", "meta_update_causes"]

Obj = dict[str, Any]
ANNOTATIONS_LIMIT = 256 * 1024  # upstream's TotalAnnotationSizeLimitB
_STANDARD_FINALIZERS = frozenset({"kubernetes", "orphan", "foregroundDeletion"})


def _labels(labels: Any) -> list[Cause]:
    if not isinstance(labels, dict):
        return [invalid("metadata.labels", labels, "must be a map of strings")]
    out: list[Cause] = []
    for key, value in labels.items():
        out += invalids("metadata.labels", key, qualified_name(key))
        if not isinstance(value, str):
            out.append(invalid("metadata.labels", value, "must be a string"))
        else:
            out += invalids("metadata.labels", value, label_value(value))
    return out


def _annotations(annotations: Any) -> list[Cause]:
    if not isinstance(annotations, dict):
        return [invalid("metadata.annotations", annotations, "must be a map of strings")]
    out: list[Cause] = []
    total = 0
    for key, value in annotations.items():
        out += invalids("metadata.annotations", key, qualified_name(key.lower()))
        total += len(key.encode()) + (len(value.encode()) if isinstance(value, str) else 0)
    if total > ANNOTATIONS_LIMIT:
        out.append(too_long("metadata.annotations", ANNOTATIONS_LIMIT))
    return out


def _finalizers(finalizers: Any) -> list[Cause]:
    if not isinstance(finalizers, list):
        return [invalid("metadata.finalizers", finalizers, "must be a list of strings")]
    out: list[Cause] = []
    for i, name in enumerate(finalizers):
        path = f"metadata.finalizers[{i}]"
        if not isinstance(name, str):
            out.append(invalid(path, name, "must be a string"))
            continue
        msgs = qualified_name(name)
        out += invalids(path, name, msgs)
        if not msgs and "/" not in name and name not in _STANDARD_FINALIZERS:
            out.append(
                invalid(
                    path,
                    name,
                    "name is neither a standard finalizer name nor is it fully qualified",
                )
            )
    if "orphan" in finalizers and "foregroundDeletion" in finalizers:
        out.append(
            invalid(
                "metadata.finalizers",
                finalizers,
                "finalizers: orphan and foregroundDeletion cannot be both set",
            )
        )
    return out


def _owner_references(refs: Any) -> list[Cause]:
    if not isinstance(refs, list):
        return [invalid("metadata.ownerReferences", refs, "must be a list")]
    out: list[Cause] = []
    controllers = []
    for i, ref in enumerate(refs):
        path = f"metadata.ownerReferences[{i}]"
        if not isinstance(ref, dict):
            out.append(invalid(path, ref, "must be an object"))
            continue
        api_version = str(ref.get("apiVersion") or "")
        if not api_version.rsplit("/", 1)[-1]:
            out.append(invalid(f"{path}.apiVersion", api_version, "version must not be empty"))
        for key in ("kind", "name", "uid"):
            if not ref.get(key):
                out.append(
                    invalid(f"{path}.{key}", str(ref.get(key) or ""), f"{key} must not be empty")
                )
        if ref.get("controller") is True:
            controllers.append(f"{ref.get('kind', '')}/{ref.get('name', '')}")
    if len(controllers) > 1:
        out.append(
            invalid(
                "metadata.ownerReferences",
                refs,
                'Only one reference can have Controller set to true. Found "true" in '
                f"references for {' and '.join(controllers)}",
            )
        )
    return out


def meta_causes(meta: Obj) -> list[Cause]:
    """Every cause ``ValidateObjectMeta`` finds in ``meta`` (name excepted)."""
    out: list[Cause] = []
    if meta.get("labels") is not None:
        out += _labels(meta["labels"])
    if meta.get("annotations") is not None:
        out += _annotations(meta["annotations"])
    if meta.get("finalizers") is not None:
        out += _finalizers(meta["finalizers"])
    if meta.get("ownerReferences") is not None:
        out += _owner_references(meta["ownerReferences"])
    return out


def meta_update_causes(new: Obj, old: Obj) -> list[Cause]:
    """``ValidateObjectMetaUpdate``: the create rules, and no new finalizers on an object
    already being deleted."""
    out = meta_causes(new)
    if old.get("deletionTimestamp"):
        before = set(old.get("finalizers") or [])
        extra = sorted(
            f for f in new.get("finalizers") or [] if isinstance(f, str) and f not in before
        )
        if extra:
            shown = ", ".join(f'"{f}"' for f in extra)
            out.append(
                forbidden(
                    "metadata.finalizers",
                    "no new finalizers can be added if the object is being deleted, "
                    f"found new finalizers []string{{{shown}}}",
                )
            )
    return out
