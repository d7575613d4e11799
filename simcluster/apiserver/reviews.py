"""The review APIs: who am I, may I (or may they), and what may I do.

``kubectl auth whoami`` creates a SelfSubjectReview, ``kubectl auth can-i`` a
SelfSubjectAccessReview, ``kubectl auth can-i --list`` a SelfSubjectRulesReview; a component
checking on behalf of others creates a SubjectAccessReview (or LocalSubjectAccessReview). All
are answered by the same authorizer that guards requests, so the answer is the truth: with
``always-allow`` everything is allowed, with ``rbac`` exactly what RBAC (and the node rules)
grants. A server verifying a caller's bearer token (the controller's placement endpoint)
creates a TokenReview, answered by the authenticator that guards requests, with upstream's
audience check. Nothing is stored.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from simcluster.apiserver.auth import Authenticator, User
from simcluster.apiserver.rbac import Attributes, Authorizer
from simcluster.apiserver.resources import ResourceType
from simcluster.errors import BadRequest, Invalid

__all__ = ["REVIEW_PLURALS", "answer_review"]

Obj = dict[str, Any]
REVIEW_PLURALS = frozenset(
    {
        "selfsubjectreviews",
        "selfsubjectaccessreviews",
        "selfsubjectrulesreviews",
        "subjectaccessreviews",
        "localsubjectaccessreviews",
        "tokenreviews",
    }
)


def answer_review(
    authorizer: Authorizer,
    rt: ResourceType,
    user: User,
    namespace: str,
    body: Obj,
    authenticator: Authenticator | None = None,
) -> Obj:
    raw = body.get("spec") if isinstance(body, dict) else None
    spec: Obj = dict(raw) if isinstance(raw, dict) else {}
    out: Obj = {
        "kind": rt.kind,
        "apiVersion": rt.api_version,
        "metadata": {"creationTimestamp": None},
    }
    if rt.plural == "selfsubjectreviews":
        out["status"] = {"userInfo": {"username": user.name, "groups": list(user.groups)}}
        return out
    out["spec"] = spec
    if rt.plural == "tokenreviews":
        out["status"] = _token_status(authenticator or Authenticator(), spec)
        return out
    if rt.plural == "selfsubjectrulesreviews":
        out["status"] = _rules_status(authorizer, user, str(spec.get("namespace") or ""))
        return out
    subject = user
    if rt.plural in ("subjectaccessreviews", "localsubjectaccessreviews"):
        subject = _subject(rt, spec)
    attrs = _attributes(rt, subject, namespace, spec)
    decision = authorizer.authorize(attrs)
    status: Obj = {"allowed": decision.allowed}
    if decision.reason:
        status["reason"] = decision.reason
    out["status"] = status
    return out


def _token_status(authenticator: Authenticator, spec: Mapping[str, Any]) -> Obj:
    """Upstream's TokenReview answer: the user, or ``authenticated`` absent and an error."""
    token = str(spec.get("token") or "")
    if not token:
        raise BadRequest("token is required for TokenReview in authentication")
    audiences = tuple(str(a) for a in spec.get("audiences") or ())
    found, common = authenticator.review(token, audiences)
    if found is None:
        return {"user": {}, "error": "[invalid bearer token, token lookup failed]"}
    user = {"username": found.name, "uid": "", "groups": list(found.groups)}
    return {"authenticated": True, "user": user, "audiences": list(common)}


def _subject(rt: ResourceType, spec: Mapping[str, Any]) -> User:
    name = str(spec.get("user") or "")
    groups = tuple(str(g) for g in spec.get("groups") or ())
    if not name and not groups:
        raise Invalid.for_object(
            rt.kind,
            rt.group,
            "",
            [
                (
                    "FieldValueRequired",
                    "spec.user",
                    "Required value: at least one of user or group must be specified",
                )
            ],
        )
    return User(name, groups)


def _attributes(
    rt: ResourceType, user: User, namespace: str, spec: Mapping[str, Any]
) -> Attributes:
    res, non = spec.get("resourceAttributes"), spec.get("nonResourceAttributes")
    res = res if isinstance(res, dict) else None
    non = non if isinstance(non, dict) else None
    if (res is None) == (non is None):
        raise Invalid.for_object(
            rt.kind,
            rt.group,
            "",
            [
                (
                    "FieldValueInvalid",
                    "spec.resourceAttributes",
                    'Invalid value: "null": exactly one of nonResourceAttributes or '
                    "resourceAttributes must be specified",
                )
            ],
        )
    if non is not None:
        return Attributes(user, str(non.get("verb") or ""), False, path=str(non.get("path") or ""))
    assert res is not None
    ns = str(res.get("namespace") or "")
    if rt.plural == "localsubjectaccessreviews":
        if ns and ns != namespace:
            raise Invalid.for_object(
                rt.kind,
                rt.group,
                "",
                [
                    (
                        "FieldValueInvalid",
                        "spec.resourceAttributes.namespace",
                        f'Invalid value: "{ns}": must match metadata.namespace',
                    )
                ],
            )
        ns = namespace
    return Attributes(
        user,
        str(res.get("verb") or ""),
        True,
        str(res.get("group") or ""),
        str(res.get("version") or ""),
        str(res.get("resource") or ""),
        str(res.get("subresource") or ""),
        ns,
        str(res.get("name") or ""),
    )


def _rules_status(authorizer: Authorizer, user: User, namespace: str) -> Obj:
    rules, incomplete = authorizer.rules_in(user, namespace)
    status: Obj = {
        "resourceRules": [r.to_rule() for r in rules if not r.urls],
        "nonResourceRules": [r.to_rule() for r in rules if r.urls],
        "incomplete": incomplete,
    }
    if incomplete:
        status["evaluationError"] = "some roles bound to the user were not found"
    return status
