"""DeleteOptions as upstream's registry reads them before a deletion starts.

``ValidateDeleteOptions`` refuses an unknown ``propagationPolicy`` and a policy together with
the legacy ``orphanDependents`` (422 on the ``DeleteOptions.meta.k8s.io`` kind); a negative
``gracePeriodSeconds`` is 1 s on the delete path (``BeforeDelete``), and one that is not an
integer is refused (400) rather than reaching the strategy.
"""

from __future__ import annotations

from typing import Any

from simcluster.errors import BadRequest, Invalid

__all__ = ["check_delete_options", "requested_grace"]

Obj = dict[str, Any]

_PROPAGATION = ("Foreground", "Background", "Orphan", "nil")


def check_delete_options(options: Obj) -> None:
    """Upstream's ``ValidateDeleteOptions``: a known propagationPolicy, not together with
    orphanDependents (422 on the DeleteOptions kind)."""
    policy = options.get("propagationPolicy")
    causes = []
    if policy is not None and policy not in _PROPAGATION[:3]:
        shown = ", ".join(f'"{p}"' for p in _PROPAGATION)
        message = f'Unsupported value: "{policy}": supported values: {shown}'
        causes.append(("FieldValueNotSupported", "propagationPolicy", message))
    if policy is not None and options.get("orphanDependents") is not None:
        message = f'Invalid value: "{policy}": orphanDependents and deletionPropagation cannot be both set'  # noqa: E501
        causes.append(("FieldValueInvalid", "propagationPolicy", message))
    if causes:
        raise Invalid.for_object("DeleteOptions", "meta.k8s.io", "", causes)


def requested_grace(options: Obj) -> int | None:
    """The grace period asked for; a negative one is 1 s on the delete path (upstream's
    ``BeforeDelete``)."""
    requested = options.get("gracePeriodSeconds")
    if requested is None:
        return None
    if not isinstance(requested, int) or isinstance(requested, bool):
        raise BadRequest(f"gracePeriodSeconds must be an integer, not {requested!r}")
    return 1 if requested < 0 else requested
