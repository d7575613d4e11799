"""Credentials for the light client: a kubeconfig, or the pod's service account.

Why not kr8s here: kr8s is what ``KubeClient`` uses, and it is right for the controller and
the facade; but its import costs ~28 MiB of RSS, more than half the node agent's budget.
This reader covers what a DaemonSet and the local stack use — the in-cluster service
account (token file re-read when the API server says 401, as bound tokens rotate), and a
kubeconfig's current (or named) context with a bearer token or token file, client
certificate and key (file or data), CA (file or data) or ``insecure-skip-tls-verify``. An
exec or auth-provider plugin is not supported: :class:`CredentialsError` says so.
"""

from __future__ import annotations

import base64
import os
import ssl
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from kube.errors import KubeError

__all__ = ["Credentials", "CredentialsError", "load_credentials"]

_SA_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")


class CredentialsError(KubeError):
    """No usable credentials (missing kubeconfig, unknown context, unsupported auth): a
    Kubernetes call that cannot be made (``status`` 0, not worth repeating)."""


@dataclass
class Credentials:
    server: str
    ssl: ssl.SSLContext | None
    namespace: str = "default"
    token: str = ""
    token_file: str = ""
    tls_server_name: str | None = None
    _headers: dict[str, str] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        if self.token_file and not self.token:
            self.reload_token()
        self._headers = {"Authorization": f"Bearer {self.token}"} if self.token else {}

    def headers(self) -> dict[str, str]:
        return self._headers

    def reload_token(self) -> None:
        """Read the token file again (a no-op without one)."""
        if self.token_file:
            try:
                self.token = Path(self.token_file).read_text().strip()
            except OSError as e:
                raise CredentialsError(f"cannot read token file {self.token_file}: {e}") from e
            self._headers = {"Authorization": f"Bearer {self.token}"}


def load_credentials(kubeconfig: str | None = None, context: str | None = None) -> Credentials:
    """``kubeconfig`` (first path of ``$KUBECONFIG``, then ~/.kube/config), else in-cluster."""
    path = kubeconfig or (os.environ.get("KUBECONFIG", "").split(os.pathsep)[0] or None)
    if path is None and (Path.home() / ".kube" / "config").exists():
        path = str(Path.home() / ".kube" / "config")
    if path is not None:
        return _from_kubeconfig(Path(path), context)
    if os.environ.get("KUBERNETES_SERVICE_HOST"):
        return _in_cluster()
    raise CredentialsError("no kubeconfig (--kubeconfig, $KUBECONFIG) and not in a cluster")


def _in_cluster() -> Credentials:
    host, port = os.environ["KUBERNETES_SERVICE_HOST"], os.environ.get("KUBERNETES_SERVICE_PORT")
    host = f"[{host}]" if ":" in host else host
    ns_file = _SA_DIR / "namespace"
    namespace = ns_file.read_text().strip() if ns_file.exists() else "default"
    context = ssl.create_default_context(cafile=str(_SA_DIR / "ca.crt"))
    return Credentials(
        server=f"https://{host}:{port or 443}",
        ssl=context,
        namespace=namespace,
        token_file=str(_SA_DIR / "token"),
    )


def _named(items: Any, name: str, what: str) -> dict[str, Any]:
    for item in items or ():
        if isinstance(item, dict) and item.get("name") == name:
            return dict(item.get(what) or {})
    raise CredentialsError(f"kubeconfig has no {what} named {name!r}")


def _from_kubeconfig(path: Path, context_name: str | None) -> Credentials:
    try:
        config = yaml.safe_load(path.read_text()) or {}
    except (OSError, yaml.YAMLError) as e:
        raise CredentialsError(f"cannot read kubeconfig {path}: {e}") from e
    name = context_name or config.get("current-context")
    if not name:
        raise CredentialsError(f"kubeconfig {path} has no current-context")
    ctx = _named(config.get("contexts"), name, "context")
    cluster = _named(config.get("clusters"), ctx.get("cluster", ""), "cluster")
    user = _named(config.get("users"), ctx.get("user", ""), "user") if ctx.get("user") else {}
    if "exec" in user or "auth-provider" in user:
        raise CredentialsError("exec and auth-provider credential plugins are not supported")
    base = path.parent
    server = str(cluster.get("server") or "")
    if not server:
        raise CredentialsError(f"cluster {ctx.get('cluster')!r} has no server")
    context = None
    if server.startswith("https:"):
        context = _tls_context(cluster, user, base)
    token_file = user.get("tokenFile") or ""
    return Credentials(
        server=server.rstrip("/"),
        ssl=context,
        namespace=str(ctx.get("namespace") or "default"),
        token=str(user.get("token") or ""),
        token_file=str(base / token_file) if token_file else "",
        tls_server_name=cluster.get("tls-server-name"),
    )


def _tls_context(cluster: dict[str, Any], user: dict[str, Any], base: Path) -> ssl.SSLContext:
    if cluster.get("insecure-skip-tls-verify"):
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    elif cluster.get("certificate-authority-data"):
        pem = base64.b64decode(cluster["certificate-authority-data"]).decode()
        context = ssl.create_default_context(cadata=pem)
    elif cluster.get("certificate-authority"):
        context = ssl.create_default_context(cafile=str(base / cluster["certificate-authority"]))
    else:
        context = ssl.create_default_context()
    cert = _pem(user, "client-certificate", base)
    key = _pem(user, "client-key", base)
    if cert and key:
        # ssl loads a chain from files only: write both to one private temporary file.
        with tempfile.NamedTemporaryFile("wb", suffix=".pem") as f:
            os.chmod(f.name, 0o600)
            f.write(cert + b"\n" + key)
            f.flush()
            context.load_cert_chain(f.name)
    return context


def _pem(user: dict[str, Any], key: str, base: Path) -> bytes:
    if user.get(f"{key}-data"):
        return base64.b64decode(user[f"{key}-data"])
    if user.get(key):
        return (base / user[key]).read_bytes()
    return b""
