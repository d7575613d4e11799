"""The facade's configuration file: secret, daemon delivery, sandbox classes, tenants.

One YAML document, because an operator reasons about them together (a class is only
usable by tenants whose quota fits it; the delivery mode must match the node image). Parsed
into frozen settings once at start; a bad file stops the facade with a message naming the
offending entry (``ConfigError``), never a traceback half-way through serving.

```yaml
secret_file: /etc/sandman/facade-secret   # or `secret:` inline (development only)
delivery: {mode: init-container, bundle_image: registry.example/sandman-daemon:0.1}
classes:
  - {name: tiny, cpu: 250m, memory: 512Mi, runtime_class: gvisor}
  # hardening relaxations, per class (docs/operator-guide.md, "Pod hardening"):
  - {name: build, capabilities: [CHOWN, FOWNER, SETUID, SETGID], user_namespace: true}
tenants:
  - {name: team-a, token_sha256: [...], max_sandboxes: 2000, create_rate_per_s: 200}
  # optional caps over live image announcements: max_prepared_images (1000),
  # max_prepared_sandboxes (20000); fair sharing (facade/fairness.py): max_tool_calls (256),
  # max_waits (1024), allowed_classes, allowed_registries (absent: any)
  - name: team-b
    token_sha256: [...]
    # standing pools (facade/standing.py): `min` unclaimed sandboxes of (image, class) kept
    # warm, at most `max` of the pool's pods alive at once, claimed ones included (absent: the
    # tenant's max_sandboxes)
    pools: [{image: registry.example/swe-base:1, class: tiny, min: 50, max: 200}]
```

``delivery_file: delivery.yaml`` (relative to this file) may stand for the ``delivery``
mapping: the delivery mode follows the cluster (a kustomize component of manifests/ swaps
that file alone), while classes and tenants follow the installation.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from sandman.wire.facade import DEFAULT_CLASS

from .errors import FacadeError
from .fairness import check_class, check_image
from .podspec import LABEL_VALUE, DaemonDelivery, SandboxClass
from .tenancy import TenancyError, Tenant, TenantDirectory
from .tokens import MIN_SECRET_BYTES, TokenMinter

__all__ = ["ConfigError", "FacadeConfig", "load_config"]

DELIVERY_MODES = ("init-container", "image-volume", "host-path", "local-process")


class ConfigError(ValueError):
    """The facade configuration is invalid."""


@dataclass(frozen=True, slots=True)
class FacadeConfig:
    minter: TokenMinter
    delivery: DaemonDelivery
    classes: Mapping[str, SandboxClass]
    tenants: TenantDirectory


def load_config(path: str | Path, clock: Callable[[], float] = time.monotonic) -> FacadeConfig:
    try:
        text = Path(path).read_text()
        document = yaml.safe_load(text) or {}
    except (OSError, yaml.YAMLError) as e:
        raise ConfigError(f"cannot read facade config {path}: {e}") from e
    if not isinstance(document, dict):
        raise ConfigError("the facade config must be a mapping")
    try:
        tenants = TenantDirectory.from_yaml(text, clock)
    except TenancyError as e:
        raise ConfigError(str(e)) from e
    classes = _classes(document.get("classes") or [{"name": DEFAULT_CLASS}])
    for tenant in tenants.tenants():
        unknown = sorted(set(tenant.allowed_classes or ()) - set(classes))
        if unknown:
            raise ConfigError(f"tenant {tenant.name}: allowed_classes names no class {unknown}")
        _check_pools(tenant, classes)
    return FacadeConfig(
        minter=_minter(document, Path(path).parent),
        delivery=_delivery(_delivery_entry(document, Path(path).parent)),
        classes=classes,
        tenants=tenants,
    )


def _check_pools(tenant: Tenant, classes: Mapping[str, SandboxClass]) -> None:
    """A standing pool's class must be offered and allowed to the tenant, its image from a
    registry the tenant may use: the pool's sandboxes are the tenant's creates made ahead."""
    for i, pool in enumerate(tenant.pools):
        where = f"tenant {tenant.name}: pools[{i}] ({pool.image}, {pool.sandbox_class})"
        if pool.sandbox_class not in classes:
            known = ", ".join(sorted(classes))
            raise ConfigError(f"{where}: no class {pool.sandbox_class!r} (known: {known})")
        try:
            check_class(tenant, pool.sandbox_class)
            check_image(tenant, pool.image)
        except FacadeError as e:
            raise ConfigError(f"{where}: {e.message}") from e


def _minter(document: Mapping[str, Any], base: Path) -> TokenMinter:
    if document.get("secret_file"):
        try:
            secret = (base / str(document["secret_file"])).read_bytes().strip()
        except OSError as e:
            raise ConfigError(f"cannot read secret_file: {e}") from e
    elif document.get("secret"):
        secret = str(document["secret"]).encode()
    else:
        raise ConfigError("the facade config needs `secret_file` (or `secret`)")
    if len(secret) < MIN_SECRET_BYTES:
        raise ConfigError(f"the facade secret must be at least {MIN_SECRET_BYTES} bytes")
    return TokenMinter(secret)


def _delivery_entry(document: Mapping[str, Any], base: Path) -> Mapping[str, Any]:
    """The ``delivery`` mapping, inline or from ``delivery_file`` (not both)."""
    if not document.get("delivery_file"):
        return document.get("delivery") or {}
    if document.get("delivery"):
        raise ConfigError("the facade config has both `delivery` and `delivery_file`")
    where = base / str(document["delivery_file"])
    try:
        entry = yaml.safe_load(where.read_text()) or {}
    except (OSError, yaml.YAMLError) as e:
        raise ConfigError(f"cannot read delivery_file {where}: {e}") from e
    if not isinstance(entry, dict):
        raise ConfigError(f"delivery_file {where} must hold a mapping")
    return entry


def _delivery(entry: Mapping[str, Any]) -> DaemonDelivery:
    mode = entry.get("mode", "init-container")
    if mode not in DELIVERY_MODES:
        raise ConfigError(f"delivery.mode must be one of {', '.join(DELIVERY_MODES)}")
    if mode in ("init-container", "image-volume") and not entry.get("bundle_image"):
        raise ConfigError(f"delivery mode {mode} needs delivery.bundle_image")
    python = (sys.executable,) if mode == "local-process" else ()
    try:
        return DaemonDelivery(
            mode=mode,
            bundle_image=str(entry.get("bundle_image", "")),
            host_path=str(entry.get("host_path", "/var/lib/sandman/bundle")),
            python=tuple(entry.get("python") or python),
        )
    except TypeError as e:
        raise ConfigError(f"delivery: {e}") from e


def _classes(entries: Any) -> dict[str, SandboxClass]:
    if not isinstance(entries, list) or not entries:
        raise ConfigError("classes must be a non-empty list")
    classes: dict[str, SandboxClass] = {}
    for i, entry in enumerate(entries):
        if not isinstance(entry, dict) or not entry.get("name"):
            raise ConfigError(f"classes[{i}] needs a name")
        try:
            c = SandboxClass(
                name=str(entry["name"]),
                cpu=str(entry.get("cpu", "250m")),
                memory=str(entry.get("memory", "512Mi")),
                ephemeral_storage=entry.get("ephemeral_storage", "1Gi"),
                runtime_class=entry.get("runtime_class"),
                priority_class=entry.get("priority_class"),
                node_selector=dict(entry.get("node_selector") or {}),
                tolerations=tuple(entry.get("tolerations") or ()),
                user_namespace=_flag(entry, "user_namespace", default=True),
                capabilities=_capabilities(entry.get("capabilities") or ()),
            )
        except (TypeError, ValueError) as e:
            raise ConfigError(f"classes[{i}]: {e}") from e
        if not LABEL_VALUE.search(c.name) or not c.name:
            raise ConfigError(f"classes[{i}]: name {c.name!r} is not a label value")
        if c.name in classes:
            raise ConfigError(f"classes[{i}]: duplicate class {c.name!r}")
        classes[c.name] = c
    return classes


#: what a class may add back after dropping ALL: Pod Security `baseline`'s list, which has
#: no NET_RAW (a pod needing more than these runs only in a `privileged` namespace)
CAPABILITIES = frozenset(
    {
        "AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD",
        "NET_BIND_SERVICE", "SETFCAP", "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT",
    }
)  # fmt: skip


def _flag(entry: Mapping[str, Any], key: str, *, default: bool) -> bool:
    value = entry.get(key, default)
    if not isinstance(value, bool):
        raise ValueError(f"{key} must be true or false")
    return value


def _capabilities(value: Any) -> tuple[str, ...]:
    if not isinstance(value, list | tuple) or not all(isinstance(c, str) for c in value):
        raise ValueError("capabilities must be a list of capability names")
    unknown = sorted(set(value) - CAPABILITIES)
    if unknown:
        allowed = ", ".join(sorted(CAPABILITIES))
        raise ValueError(f"capabilities {', '.join(unknown)} not allowed (one of {allowed})")
    return tuple(value)
