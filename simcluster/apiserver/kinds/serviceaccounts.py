"""The service-account strategy: ``serviceaccounts/token`` (TokenRequest) mints a bearer
token the server's authenticator accepts as ``system:serviceaccount:<ns>:<name>``.

Nothing is stored: as upstream, the token is the answer to the POST. The expiry is reported
(``expirationSeconds``, default one hour) but not enforced.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from simcluster.apiserver.auth import service_account_user
from simcluster.apiserver.meta import now, rfc3339
from simcluster.apiserver.resources import ResourceType
from simcluster.apiserver.strategy import Strategy, StrategyContext

__all__ = ["ServiceAccountStrategy"]

Obj = dict[str, Any]


class ServiceAccountStrategy(Strategy):
    def __init__(self, ctx: StrategyContext) -> None:
        self.writer = ctx.writer
        self.auth = ctx.auth

    def create_subresource(
        self, rt: ResourceType, subresource: str, namespace: str, name: str, body: Any
    ) -> Obj:
        if subresource != "token":
            return super().create_subresource(rt, subresource, namespace, name, body)
        return self.token(rt, namespace, name, body)

    def token(self, rt: ResourceType, namespace: str, name: str, body: Any) -> Obj:
        self.writer.lookup(rt, namespace, name)
        spec = dict((body or {}).get("spec") or {})
        seconds = int(spec.get("expirationSeconds") or 3600)
        spec["expirationSeconds"] = seconds
        return {
            "kind": "TokenRequest",
            "apiVersion": "authentication.k8s.io/v1",
            "metadata": {"name": name, "namespace": namespace, "creationTimestamp": None},
            "spec": spec,
            "status": {
                "token": self.auth.issue(
                    service_account_user(namespace, name),
                    tuple(str(a) for a in spec.get("audiences") or ()),
                ),
                "expirationTimestamp": rfc3339(now() + dt.timedelta(seconds=seconds)),
            },
        }
