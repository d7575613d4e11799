"""List and watch options (``ListOptions``, the query the verbs read) as upstream's handler
checks them before the storage sees them.

``resourceVersionMatch`` and ``sendInitialEvents`` only make sense together with other
options; upstream's ``ValidateListOptions`` (k8s.io/apiserver, ``metainternalversion/
validation``) refuses the combinations that do not, with one 422 on the
``ListOptions.meta.k8s.io`` kind listing every cause, and clients (client-go's reflector
falling back from watch-list to list+watch) key on exactly that answer. The rules are
written out here, in upstream's order and words, so a client that sends a bad combination
learns it here rather than on a real cluster.

``too_large`` is the answer to a resourceVersion the server has not reached yet (upstream's
``NewTooLargeResourceVersionError``: a 504 Timeout with the ``ResourceVersionTooLarge``
cause and Retry-After 1, which client-go's reflector retries).
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from dataclasses import dataclass

import msgspec

from simcluster.apiserver.validation.fields import Cause, forbidden, not_supported
from simcluster.errors import BadRequest, Invalid, Timeout

__all__ = [
    "EXACT",
    "INCONSISTENT_CONTINUE",
    "NOT_OLDER_THAN",
    "ListOptions",
    "decode_continue",
    "encode_continue",
    "too_large",
    "validate_list_options",
]


@dataclass(frozen=True, slots=True)
class ListOptions:
    """A list, watch or deletecollection request's query, as the verbs read it."""

    label_selector: str | None = None
    field_selector: str | None = None
    limit: int = 0
    continue_token: str | None = None
    resource_version: str | None = None
    resource_version_match: str | None = None


EXACT = "Exact"
NOT_OLDER_THAN = "NotOlderThan"
_MATCH = "resourceVersionMatch"


def _list_causes(q: Mapping[str, str]) -> list[Cause]:
    causes: list[Cause] = []
    match = q.get(_MATCH, "")
    if match:
        if not q.get("resourceVersion"):
            causes.append(
                forbidden(
                    _MATCH, "resourceVersionMatch is forbidden unless resourceVersion is provided"
                )
            )
        if q.get("continue"):
            causes.append(
                forbidden(_MATCH, "resourceVersionMatch is forbidden when continue is provided")
            )
        if match not in (EXACT, NOT_OLDER_THAN):
            causes.append(not_supported(_MATCH, match, (EXACT, NOT_OLDER_THAN, "")))
        if match == EXACT and q.get("resourceVersion") == "0":
            causes.append(
                forbidden(
                    _MATCH, 'resourceVersionMatch "exact" is forbidden for resourceVersion "0"'
                )
            )
    if "sendInitialEvents" in q:
        causes.append(forbidden("sendInitialEvents", "sendInitialEvents is forbidden for list"))
    return causes


def _watch_causes(q: Mapping[str, str]) -> list[Cause]:
    causes: list[Cause] = []
    match = q.get(_MATCH, "")
    if "sendInitialEvents" in q and match != NOT_OLDER_THAN:
        causes.append(
            forbidden(
                _MATCH,
                f"sendInitialEvents requires setting resourceVersionMatch to {NOT_OLDER_THAN}",
            )
        )
    if match:
        if "sendInitialEvents" not in q:
            causes.append(
                forbidden(
                    _MATCH,
                    "resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided",  # noqa: E501
                )
            )
        if match != NOT_OLDER_THAN:
            causes.append(not_supported(_MATCH, match, (NOT_OLDER_THAN,)))
        if q.get("continue"):
            causes.append(
                forbidden(_MATCH, "resourceVersionMatch is forbidden when continue is provided")
            )
    return causes


def validate_list_options(q: Mapping[str, str], *, watch: bool) -> None:
    """Raise upstream's 422 for a list's (or a watch's) query that combines options wrongly."""
    causes = _watch_causes(q) if watch else _list_causes(q)
    if causes:
        raise Invalid.for_object("ListOptions", "meta.k8s.io", "", causes)


def too_large(asked: int, current: int) -> Timeout:
    """A resourceVersion newer than the server's newest (upstream first waits up to 3 s for
    its watch cache to catch up; this store is never behind, so it answers at once)."""
    return Timeout(
        f"Timeout: Too large resource version: {asked}, current: {current}",
        details={
            "causes": [
                {"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}
            ]
        },
        retry_after=1,
    )


INCONSISTENT_CONTINUE = (
    "The provided continue parameter is too old to display a consistent list result. "
    "You can start a new list without the continue parameter, or use the continue token in "
    "this response to retrieve the remainder of the results. Continuing with the provided "
    "token results in an inconsistent list - objects that were created, modified, or deleted "
    "between the time the first chunk was returned and now may show up in the list."
)


#: Continue tokens as upstream encodes them: base64 of {"v": "meta.k8s.io/v1", "rv": the
#: list's revision (-1: the latest), "start": the key to go on after}.
def encode_continue(rv: int, start: str) -> str:
    raw = msgspec.json.encode({"v": "meta.k8s.io/v1", "rv": rv, "start": start})
    return base64.urlsafe_b64encode(raw).decode()


def decode_continue(token: str) -> tuple[int, str]:
    try:
        data = msgspec.json.decode(base64.urlsafe_b64decode(token.encode()))
        return int(data["rv"]), str(data["start"])
    except (ValueError, KeyError, TypeError, msgspec.DecodeError):
        raise BadRequest(
            "continue key is not valid: incorrect encoded start resourceVersion (version meta.k8s.io/v1)"  # noqa: E501
        )
