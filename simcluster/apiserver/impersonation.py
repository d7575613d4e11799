"""User impersonation (``Impersonate-User`` / ``Impersonate-Group`` headers), as upstream's
``WithImpersonation`` filter.

Why: the way an operator checks least privilege is ``kubectl auth can-i --as
system:serviceaccount:sandman-system:sandman-controller ...`` (or ``--list``); a server that
ignored the headers would answer for the admin instead. The requester needs the
``impersonate`` verb on ``users`` (by name), ``serviceaccounts`` (in the account's namespace)
and ``groups``; the request then runs as the impersonated user, with the groups upstream adds
(a service account's own groups when none are given, ``system:authenticated``).
"""

from __future__ import annotations

from collections.abc import Mapping

from simcluster.apiserver.auth import User, service_account_user
from simcluster.apiserver.rbac import Attributes, Authorizer
from simcluster.errors import BadRequest

__all__ = ["impersonate"]


def impersonate(
    authorizer: Authorizer, user: User, headers: Mapping[str, str], groups: list[str]
) -> User:
    """The user a request acts as: ``user`` itself without an ``Impersonate-User`` header,
    else the impersonated one (403 Forbidden unless ``user`` may impersonate it).
    ``groups`` are the request's ``Impersonate-Group`` header values."""
    name = headers.get("Impersonate-User")
    if name is None:
        if groups:
            raise BadRequest("requested impersonation of groups without a user")
        return user
    for group in groups:
        authorizer.check(_attrs(user, "groups", group))
    sa = User(name).service_account
    if sa is not None:
        authorizer.check(_attrs(user, "serviceaccounts", sa[1], sa[0]))
        acting = service_account_user(*sa) if not groups else User(name, tuple(groups))
    else:
        authorizer.check(_attrs(user, "users", name))
        acting = User(name, tuple(groups))
    if name != "system:anonymous" and "system:authenticated" not in acting.groups:
        acting = User(acting.name, (*acting.groups, "system:authenticated"))
    return acting


def _attrs(user: User, resource: str, name: str, namespace: str = "") -> Attributes:
    return Attributes(user, "impersonate", True, "", "v1", resource, "", namespace, name)
