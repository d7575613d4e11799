"""Bearer-token authentication and kubeconfig files.

Tokens map to a user name and groups exactly as the real authenticators report them:
service-account tokens become ``system:serviceaccount:<ns>:<name>`` in the groups
``system:serviceaccounts`` and ``system:serviceaccounts:<ns>``; kubelets are
``system:node:<node>`` in ``system:nodes``. Every authenticated user is also in
``system:authenticated``. There is no authorization (RBAC objects are stored, not enforced).
"""

from __future__ import annotations

import base64
import os
import secrets
from dataclasses import dataclass, field
from pathlib import Path

import yaml

__all__ = ["API_AUDIENCE", "Authenticator", "User", "service_account_user", "write_kubeconfig"]

#: The audience of a token issued without one (the API server's own, as upstream's default
#: ``--api-audiences``): what a TokenReview that names no audiences checks for.
API_AUDIENCE = "https://kubernetes.default.svc"


@dataclass(frozen=True, slots=True)
class User:
    name: str
    groups: tuple[str, ...] = ()

    @property
    def is_node(self) -> bool:
        return "system:nodes" in self.groups

    @property
    def service_account(self) -> tuple[str, str] | None:
        if self.name.startswith("system:serviceaccount:"):
            ns, _, name = self.name.removeprefix("system:serviceaccount:").partition(":")
            return ns, name
        return None


def service_account_user(namespace: str, name: str) -> User:
    return User(
        f"system:serviceaccount:{namespace}:{name}",
        ("system:serviceaccounts", f"system:serviceaccounts:{namespace}", "system:authenticated"),
    )


@dataclass
class Authenticator:
    """Token → user table. ``issue`` mints a random token for a user, valid for
    ``audiences`` (default: the API server's)."""

    tokens: dict[str, User] = field(default_factory=dict)
    audiences: dict[str, tuple[str, ...]] = field(default_factory=dict)

    def issue(self, user: User, audiences: tuple[str, ...] = ()) -> str:
        token = secrets.token_urlsafe(24)
        self.audiences[token] = audiences or (API_AUDIENCE,)
        groups = (
            user.groups
            if "system:authenticated" in user.groups
            else (*user.groups, "system:authenticated")
        )
        self.tokens[token] = User(user.name, groups)
        return token

    def authenticate(self, header: str | None) -> User | None:
        if not header or not header.startswith("Bearer "):
            return None
        return self.tokens.get(header[7:].strip())

    def review(self, token: str, audiences: tuple[str, ...]) -> tuple[User | None, tuple[str, ...]]:
        """A TokenReview's answer: the token's user (None: not authenticated) and the
        audiences it was checked for (``audiences``, default the API server's, that the
        token is valid for; none in common: not authenticated)."""
        user = self.tokens.get(token)
        wanted = audiences or (API_AUDIENCE,)
        common = tuple(a for a in wanted if a in self.audiences.get(token, (API_AUDIENCE,)))
        if user is None or not common:
            return None, ()
        return user, common


def write_kubeconfig(
    path: Path,
    server: str,
    token: str,
    *,
    user: str = "admin",
    namespace: str = "default",
    ca_pem: bytes | None = None,
) -> Path:
    """Write a kubeconfig (mode 0600) that kubectl, kr8s and the official client all read."""
    cluster: dict[str, str] = {"server": server}
    if ca_pem is not None:
        cluster["certificate-authority-data"] = base64.b64encode(ca_pem).decode()
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "simcluster", "cluster": cluster}],
        "users": [{"name": user, "user": {"token": token}}],
        "contexts": [
            {
                "name": "simcluster",
                "context": {"cluster": "simcluster", "user": user, "namespace": namespace},
            }
        ],
        "current-context": "simcluster",
        "preferences": {},
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        yaml.safe_dump(config, f, sort_keys=False)
    return path
