"""The Pod Security Standards' checks, one function per check and version, worded as upstream's.

Why a table of small functions: upstream's ``k8s.io/pod-security-admission/policy`` defines
each check as an ID, a level and a list of versioned implementations, and the policy at a
level and version is the set of the newest implementation of each check not newer than that
version. Clients (and Sandman's tests) read the reasons and details of a refusal, so each
function here answers exactly what upstream's would for the same pod: a ``(reason, detail)``
pair, or ``None`` when the pod passes. ``podsecurity.py`` assembles them into levels.

Pods are plain dicts as they are stored; a field that is absent or ``null`` is unset, as a
nil pointer is upstream.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

__all__ = ["CheckFn", "Result"]

Obj = dict[str, Any]
Result = tuple[str, str] | None
CheckFn = Callable[[Obj, Obj], Result]

_CAP_ALL, _NET_BIND = "ALL", "NET_BIND_SERVICE"
_BASELINE_CAPS = frozenset(
    [
        "AUDIT_WRITE",
        "CHOWN",
        "DAC_OVERRIDE",
        "FOWNER",
        "FSETID",
        "KILL",
        "MKNOD",
        "NET_BIND_SERVICE",
        "SETFCAP",
        "SETGID",
        "SETPCAP",
        "SETUID",
        "SYS_CHROOT",
    ]
)
_SECCOMP_POD = "seccomp.security.alpha.kubernetes.io/pod"
_SECCOMP_CONTAINER = "container.seccomp.security.alpha.kubernetes.io/"
_APPARMOR_CONTAINER = "container.apparmor.security.beta.kubernetes.io/"
SELINUX_TYPES_1_0 = frozenset({"", "container_t", "container_init_t", "container_kvm_t"})
SELINUX_TYPES_1_31 = SELINUX_TYPES_1_0 | {"container_engine_t"}
SYSCTLS_1_0 = frozenset(
    [
        "kernel.shm_rmid_forced",
        "net.ipv4.ip_local_port_range",
        "net.ipv4.tcp_syncookies",
        "net.ipv4.ping_group_range",
        "net.ipv4.ip_unprivileged_port_start",
    ]
)
SYSCTLS_1_27 = SYSCTLS_1_0 | {"net.ipv4.ip_local_reserved_ports"}
SYSCTLS_1_29 = SYSCTLS_1_27 | {
    "net.ipv4.tcp_keepalive_time",
    "net.ipv4.tcp_fin_timeout",
    "net.ipv4.tcp_keepalive_intvl",
    "net.ipv4.tcp_keepalive_probes",
}
SYSCTLS_1_32 = SYSCTLS_1_29 | {"net.ipv4.tcp_rmem", "net.ipv4.tcp_wmem"}
SYSCTLS_1_37 = SYSCTLS_1_32 | {"net.ipv4.tcp_slow_start_after_idle", "net.ipv4.tcp_notsent_lowat"}
#: the volume sources `restricted` admits; any other source is named in the refusal
_SAFE_VOLUMES = frozenset(
    [
        "configMap",
        "csi",
        "downwardAPI",
        "emptyDir",
        "ephemeral",
        "image",
        "persistentVolumeClaim",
        "projected",
        "secret",
    ]
)
_VOLUME_SOURCES = [
    "hostPath",
    "gcePersistentDisk",
    "awsElasticBlockStore",
    "gitRepo",
    "nfs",
    "iscsi",
    "glusterfs",
    "rbd",
    "flexVolume",
    "cinder",
    "cephfs",
    "flocker",
    "fc",
    "azureFile",
    "vsphereVolume",
    "quobyte",
    "azureDisk",
    "photonPersistentDisk",
    "portworxVolume",
    "scaleIO",
    "storageos",
]


# --- helpers -------------------------------------------------------------------------------
def _containers(spec: Obj) -> Iterator[Obj]:
    """Init containers, containers, ephemeral containers: upstream's visiting order."""
    for key in ("initContainers", "containers", "ephemeralContainers"):
        yield from spec.get(key) or []


def _sc(obj: Obj) -> Obj:
    return obj.get("securityContext") or {}


def _quote(items: list[str]) -> str:
    return ", ".join(f'"{i}"' for i in items)


def _plural(singular: str, plural: str, n: int) -> str:
    return singular if n == 1 else plural


def _named(names: list[str]) -> str:
    """``container "a"`` / ``containers "a", "b"``."""
    return f"{_plural('container', 'containers', len(names))} {_quote(names)}"


def _windows(spec: Obj) -> bool:
    return (spec.get("os") or {}).get("name") == "windows"


def _user_namespaced(spec: Obj) -> bool:
    """The user-namespace relaxation: ``hostUsers: false`` set explicitly."""
    return spec.get("hostUsers") is False


def not_windows(fn: CheckFn) -> CheckFn:
    """From 1.25 a pod that says it is a Windows pod is exempt from Linux-only checks."""
    return lambda meta, spec: None if _windows(spec) else fn(meta, spec)


def relaxed_in_userns(fn: CheckFn) -> CheckFn:
    return lambda meta, spec: None if _user_namespaced(spec) else fn(meta, spec)


def _setters(pod_bad: bool, containers: list[str]) -> list[str]:
    out = ["pod"] if pod_bad else []
    if containers:
        out.append(_named(containers))
    return out


# --- baseline ------------------------------------------------------------------------------
def apparmor(meta: Obj, spec: Obj) -> Result:
    ok = ("RuntimeDefault", "Localhost")
    bad_values: set[str] = set()
    pod_profile = _sc(spec).get("appArmorProfile")
    pod_bad = pod_profile is not None and pod_profile.get("type") not in ok
    if pod_bad:
        bad_values.add(str((pod_profile or {}).get("type") or ""))
    containers = []
    for c in _containers(spec):
        profile = _sc(c).get("appArmorProfile")
        if profile is not None and profile.get("type") not in ok:
            containers.append(c.get("name", ""))
            bad_values.add(str(profile.get("type") or ""))
    setters = _setters(pod_bad, containers)
    annotations = sorted(
        f'{k}="{v}"'
        for k, v in (meta.get("annotations") or {}).items()
        if k.startswith(_APPARMOR_CONTAINER)
        and not (v in ("", "runtime/default") or v.startswith("localhost/"))
    )
    values = sorted(bad_values) + annotations
    if annotations:
        setters.append(_plural("annotation", "annotations", len(annotations)))
    if not setters:
        return None
    reason = _plural("forbidden AppArmor profile", "forbidden AppArmor profiles", len(values))
    return reason, f"{' and '.join(setters)} must not set AppArmor profile type to {_quote(values)}"


def capabilities_baseline(meta: Obj, spec: Obj) -> Result:
    bad, caps = [], set()
    for c in _containers(spec):
        extra = {str(a) for a in (_sc(c).get("capabilities") or {}).get("add") or []}
        extra -= _BASELINE_CAPS
        if extra:
            bad.append(c.get("name", ""))
            caps |= extra
    if not bad:
        return None
    detail = (
        f"{_named(bad)} must not include {_quote(sorted(caps))} in securityContext.capabilities.add"
    )
    return "non-default capabilities", detail


def host_namespaces(meta: Obj, spec: Obj) -> Result:
    found = [f"{k}=true" for k in ("hostNetwork", "hostPID", "hostIPC") if spec.get(k)]
    return ("host namespaces", ", ".join(found)) if found else None


def host_path_volumes(meta: Obj, spec: Obj) -> Result:
    names = [v.get("name", "") for v in spec.get("volumes") or [] if v.get("hostPath") is not None]
    if not names:
        return None
    return "hostPath volumes", f"{_plural('volume', 'volumes', len(names))} {_quote(names)}"


def host_ports(meta: Obj, spec: Obj) -> Result:
    bad, ports = [], set()
    for c in _containers(spec):
        used = {int(p["hostPort"]) for p in c.get("ports") or [] if p.get("hostPort")}
        if used:
            bad.append(c.get("name", ""))
            ports |= used
    if not bad:
        return None
    listed = ", ".join(sorted(str(p) for p in ports))  # sorted as strings, as upstream's set
    detail = (
        f"{_named(bad)} {_plural('uses', 'use', len(bad))} "
        f"{_plural('hostPort', 'hostPorts', len(ports))} {listed}"
    )
    return "hostPort", detail


def _handler_hosts(handler: Obj | None) -> list[str]:
    handler = handler or {}
    return [h for k in ("httpGet", "tcpSocket") if (h := (handler.get(k) or {}).get("host"))]


def host_probes(meta: Obj, spec: Obj) -> Result:
    bad: set[str] = set()
    hosts: set[str] = set()
    for c in _containers(spec):
        lifecycle = c.get("lifecycle") or {}
        handlers = [c.get(p) for p in ("livenessProbe", "readinessProbe", "startupProbe")]
        handlers += [lifecycle.get("postStart"), lifecycle.get("preStop")]
        found = [h for handler in handlers for h in _handler_hosts(handler)]
        if found:
            bad.add(c.get("name", ""))
            hosts |= set(found)
    if not bad:
        return None
    detail = (
        f"{_named(sorted(bad))} {_plural('uses', 'use', len(bad))} "
        f"{_plural('probe or lifecycle host', 'probe or lifecycle hosts', len(hosts))} "
        f"{_quote(sorted(hosts))}"
    )
    return "probe or lifecycle host", detail


def privileged(meta: Obj, spec: Obj) -> Result:
    bad = [c.get("name", "") for c in _containers(spec) if _sc(c).get("privileged") is True]
    if not bad:
        return None
    return "privileged", f"{_named(bad)} must not set securityContext.privileged=true"


def proc_mount(meta: Obj, spec: Obj) -> Result:
    bad, kinds = [], set()
    for c in _containers(spec):
        mount = _sc(c).get("procMount")
        if mount is not None and mount != "Default":
            bad.append(c.get("name", ""))
            kinds.add(str(mount))
    if not bad:
        return None
    return (
        "procMount",
        f"{_named(bad)} must not set securityContext.procMount to {_quote(sorted(kinds))}",
    )


def selinux(allowed: frozenset[str]) -> CheckFn:
    def check(meta: Obj, spec: Obj) -> Result:
        bad_types: set[str] = set()
        flags = {"user": False, "role": False}

        def bad(options: Obj | None) -> bool:
            if options is None:
                return False
            wrong = False
            if str(options.get("type") or "") not in allowed:
                bad_types.add(str(options.get("type") or ""))
                wrong = True
            for k in flags:
                if options.get(k):
                    flags[k] = wrong = True
            return wrong

        pod_bad = bad(_sc(spec).get("seLinuxOptions"))
        containers = [
            c.get("name", "") for c in _containers(spec) if bad(_sc(c).get("seLinuxOptions"))
        ]
        setters = _setters(pod_bad, containers)
        if not setters:
            return None
        data = (
            [f"{_plural('type', 'types', len(bad_types))} {_quote(sorted(bad_types))}"]
            if bad_types
            else []
        )
        data += [f"{k} may not be set" for k, set_ in flags.items() if set_]
        detail = f"{' and '.join(setters)} set forbidden securityContext.seLinuxOptions: "
        detail += "; ".join(data)
        return "seLinuxOptions", detail

    return check


def _seccomp_annotation_ok(value: str) -> bool:
    return value in ("runtime/default", "docker/default") or value.startswith("localhost/")


def seccomp_annotations(meta: Obj, spec: Obj) -> Result:
    annotations = meta.get("annotations") or {}
    keys = [_SECCOMP_POD] + [_SECCOMP_CONTAINER + c.get("name", "") for c in _containers(spec)]
    bad = sorted(
        f'{k}="{annotations[k]}"'
        for k in set(keys)
        if k in annotations and not _seccomp_annotation_ok(annotations[k])
    )
    if not bad:
        return None
    return (
        "seccompProfile",
        f"forbidden {_plural('annotation', 'annotations', len(bad))} {', '.join(bad)}",
    )


def seccomp(required: bool) -> CheckFn:
    """Baseline: never ``Unconfined``; restricted: also set, on the pod or every container."""

    def check(meta: Obj, spec: Obj) -> Result:
        ok, values = ("RuntimeDefault", "Localhost"), set()
        pod_profile = _sc(spec).get("seccompProfile")
        pod_bad = pod_profile is not None and pod_profile.get("type") not in ok
        if pod_bad:
            values.add(str((pod_profile or {}).get("type") or ""))
        explicit, implicit = [], []
        for c in _containers(spec):
            profile = _sc(c).get("seccompProfile")
            if profile is not None and profile.get("type") not in ok:
                explicit.append(c.get("name", ""))
                values.add(str(profile.get("type") or ""))
            elif profile is None and (pod_profile is None or pod_bad):
                implicit.append(c.get("name", ""))
        if setters := _setters(pod_bad, explicit):
            detail = f"{' and '.join(setters)} must not set securityContext.seccompProfile.type"
            detail += f" to {_quote(sorted(values))}"
            return "seccompProfile", detail
        if required and implicit:
            detail = (
                f"pod or {_named(implicit)} must set securityContext.seccompProfile.type to "
                '"RuntimeDefault" or "Localhost"'
            )
            return "seccompProfile", detail
        return None

    return check


def sysctls(allowed: frozenset[str]) -> CheckFn:
    def check(meta: Obj, spec: Obj) -> Result:
        names = [str(s.get("name")) for s in _sc(spec).get("sysctls") or []]
        bad = [n for n in names if n not in allowed]
        return ("forbidden sysctls", ", ".join(bad)) if bad else None

    return check


def host_process(meta: Obj, spec: Obj) -> Result:
    def on(sc: Obj) -> bool:
        return (sc.get("windowsOptions") or {}).get("hostProcess") is True

    containers = [c.get("name", "") for c in _containers(spec) if on(_sc(c))]
    setters = _setters(on(_sc(spec)), containers)
    if not setters:
        return None
    return (
        "hostProcess",
        f"{' and '.join(setters)} must not set securityContext.windowsOptions.hostProcess=true",
    )


# --- restricted ----------------------------------------------------------------------------
def privilege_escalation(meta: Obj, spec: Obj) -> Result:
    bad = [
        c.get("name", "")
        for c in _containers(spec)
        if _sc(c).get("allowPrivilegeEscalation") is not False
    ]
    if not bad:
        return None
    return (
        "allowPrivilegeEscalation != false",
        f"{_named(bad)} must set securityContext.allowPrivilegeEscalation=false",
    )


def capabilities_restricted(meta: Obj, spec: Obj) -> Result:
    missing_drop, adding, caps = [], [], set()
    for c in _containers(spec):
        capabilities = _sc(c).get("capabilities")
        if capabilities is None:
            missing_drop.append(c.get("name", ""))
            continue
        if _CAP_ALL not in (capabilities.get("drop") or []):
            missing_drop.append(c.get("name", ""))
        extra = {str(a) for a in capabilities.get("add") or []} - {_NET_BIND}
        if extra:
            adding.append(c.get("name", ""))
            caps |= extra
    details = []
    if missing_drop:
        details.append(f'{_named(missing_drop)} must set securityContext.capabilities.drop=["ALL"]')
    if adding:
        details.append(
            f"{_named(adding)} must not include {_quote(sorted(caps))} "
            "in securityContext.capabilities.add"
        )
    return ("unrestricted capabilities", "; ".join(details)) if details else None


def restricted_volumes(meta: Obj, spec: Obj) -> Result:
    bad, kinds = [], set()
    for volume in spec.get("volumes") or []:
        if any(volume.get(k) is not None for k in _SAFE_VOLUMES):
            continue
        bad.append(volume.get("name", ""))
        kinds.add(next((k for k in _VOLUME_SOURCES if volume.get(k) is not None), "unknown"))
    if not bad:
        return None
    detail = (
        f"{_plural('volume', 'volumes', len(bad))} {_quote(bad)} "
        f"{_plural('uses', 'use', len(bad))} "
        f"{_plural('restricted volume type', 'restricted volume types', len(kinds))} "
        f"{_quote(sorted(kinds))}"
    )
    return "restricted volume types", detail


def run_as_non_root(meta: Obj, spec: Obj) -> Result:
    pod_value = _sc(spec).get("runAsNonRoot")
    explicit = [c.get("name", "") for c in _containers(spec) if _sc(c).get("runAsNonRoot") is False]
    implicit = [
        c.get("name", "")
        for c in _containers(spec)
        if _sc(c).get("runAsNonRoot") is None and pod_value is not True
    ]
    if setters := _setters(pod_value is False, explicit):
        return (
            "runAsNonRoot != true",
            f"{' and '.join(setters)} must not set securityContext.runAsNonRoot=false",
        )
    if implicit:
        return (
            "runAsNonRoot != true",
            f"pod or {_named(implicit)} must set securityContext.runAsNonRoot=true",
        )
    return None


def run_as_user(meta: Obj, spec: Obj) -> Result:
    explicit = [c.get("name", "") for c in _containers(spec) if _sc(c).get("runAsUser") == 0]
    setters = _setters(_sc(spec).get("runAsUser") == 0, explicit)
    return ("runAsUser=0", f"{' and '.join(setters)} must not set runAsUser=0") if setters else None
