"""Pod Security admission: a namespace's `pod-security.kubernetes.io/*` labels enforced on pods.

Why simcluster has it: what Sandman promises about a sandbox pod's hardening (seccomp,
capabilities, no privilege escalation, user namespaces) is only worth what the cluster checks.
A real cluster refuses a pod that violates its namespace's `enforce` level with a 403; with
this module the simulated one does too, so a test that creates every rendered sandbox pod in
a namespace labelled `restricted` proves the pod is admitted, not merely that it looks right.

As upstream's plugin (``k8s.io/pod-security-admission``): the labels `enforce`, `audit`,
`warn` and their `-version`s (``latest`` or ``v1.x``) resolve to a policy, defaulting to
`privileged:latest`; an unparsable `enforce` level fails closed to `restricted` (warn and
audit fail open), and `warn` defaults to `enforce` when enforce is the stricter. A pod
create, and an update that changes a container image or the set of containers, is checked
against `enforce` (a refusal names every failed check, baseline checks first, each sorted
by ID). Pod subresources (status, binding) are never checked. Of upstream's configured
exemptions only RuntimeClasses are modelled (``ServerSettings.pod_security_exempt_runtime_
classes``: a sandboxing runtime such as gVisor, whose pods the operator trusts to the
runtime). `warn` and `audit` are resolved as upstream resolves them but not answered:
simcluster sends no ``Warning`` headers and keeps no audit log
(docs/simcluster-conformance.md).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from simcluster.apiserver import podsecurity_checks as checks
from simcluster.apiserver.podsecurity_checks import CheckFn, Result

__all__ = [
    "CHECKS",
    "LATEST_MINOR",
    "Check",
    "LevelVersion",
    "Policy",
    "evaluate",
    "policy_of",
    "refusal",
    "significant_update",
]

Obj = dict[str, Any]
LEVELS = ("privileged", "baseline", "restricted")
PREFIX = "pod-security.kubernetes.io/"


class Check:
    """One check: its ID, level, the minor versions its implementations start at, and the
    baseline checks it replaces at the restricted level (upstream's ``OverrideCheckIDs``)."""

    __slots__ = ("id", "level", "overrides", "versions")

    def __init__(
        self, id: str, level: str, versions: dict[int, CheckFn], overrides: tuple[str, ...] = ()
    ) -> None:
        self.id, self.level, self.versions, self.overrides = id, level, versions, overrides

    def at(self, minor: int) -> CheckFn | None:
        """The implementation for policy version 1.``minor`` (None before the first)."""
        starts = [v for v in self.versions if v <= minor]
        return self.versions[max(starts)] if starts else None


_B, _R = "baseline", "restricted"
CHECKS: tuple[Check, ...] = (
    Check("appArmorProfile", _B, {0: checks.apparmor}),
    Check("capabilities_baseline", _B, {0: checks.capabilities_baseline}),
    Check("hostNamespaces", _B, {0: checks.host_namespaces}),
    Check("hostPathVolumes", _B, {0: checks.host_path_volumes}),
    Check("hostPorts", _B, {0: checks.host_ports}),
    Check("hostProbesAndHostLifecycle", _B, {34: checks.host_probes}),
    Check("privileged", _B, {0: checks.privileged}),
    Check("procMount", _B, {0: checks.proc_mount, 35: checks.relaxed_in_userns(checks.proc_mount)}),
    Check(
        "seLinuxOptions",
        _B,
        {
            0: checks.selinux(checks.SELINUX_TYPES_1_0),
            31: checks.selinux(checks.SELINUX_TYPES_1_31),
        },
    ),
    Check(
        "seccompProfile_baseline",
        _B,
        {0: checks.seccomp_annotations, 19: checks.seccomp(required=False)},
    ),
    Check(
        "sysctls",
        _B,
        {
            0: checks.sysctls(checks.SYSCTLS_1_0),
            27: checks.sysctls(checks.SYSCTLS_1_27),
            29: checks.sysctls(checks.SYSCTLS_1_29),
            32: checks.sysctls(checks.SYSCTLS_1_32),
            37: checks.sysctls(checks.SYSCTLS_1_37),
        },
    ),
    Check("windowsHostProcess", _B, {0: checks.host_process}),
    Check(
        "allowPrivilegeEscalation",
        _R,
        {8: checks.privilege_escalation, 25: checks.not_windows(checks.privilege_escalation)},
    ),
    Check(
        "capabilities_restricted",
        _R,
        {
            22: checks.capabilities_restricted,
            25: checks.not_windows(checks.capabilities_restricted),
        },
        ("capabilities_baseline",),
    ),
    Check("procMount_restricted", _R, {35: checks.proc_mount}, ("procMount",)),
    Check("restrictedVolumes", _R, {0: checks.restricted_volumes}, ("hostPathVolumes",)),
    Check(
        "runAsNonRoot",
        _R,
        {0: checks.run_as_non_root, 35: checks.relaxed_in_userns(checks.run_as_non_root)},
    ),
    Check(
        "runAsUser", _R, {23: checks.run_as_user, 35: checks.relaxed_in_userns(checks.run_as_user)}
    ),
    Check(
        "seccompProfile_restricted",
        _R,
        {19: checks.seccomp(required=True), 25: checks.not_windows(checks.seccomp(required=True))},
        ("seccompProfile_baseline",),
    ),
)


#: what ``latest`` means: the newest version any check has an implementation for
LATEST_MINOR = max(v for c in CHECKS for v in c.versions)
_VERSION = re.compile(r"^v1\.([0-9]|[1-9][0-9]*)$")


@dataclass(frozen=True, slots=True)
class LevelVersion:
    level: str
    minor: int | None = None  # None: latest

    def __str__(self) -> str:
        return f"{self.level}:{'latest' if self.minor is None else f'v1.{self.minor}'}"


@dataclass(frozen=True, slots=True)
class Policy:
    enforce: LevelVersion = LevelVersion("privileged")
    audit: LevelVersion = LevelVersion("privileged")
    warn: LevelVersion = LevelVersion("privileged")


def _version(value: str) -> int | None:
    if value == "latest" or not (m := _VERSION.match(value)):
        return None  # an unparsable version is latest, as upstream
    return int(m.group(1))


def policy_of(labels: dict[str, str] | None) -> Policy:
    """The namespace's policy from its labels (upstream's ``PolicyToEvaluate``)."""
    labels = labels or {}
    modes: dict[str, LevelVersion] = {}
    for mode in ("enforce", "audit", "warn"):
        level = labels.get(PREFIX + mode, "privileged")
        if level not in LEVELS:
            level = "restricted" if mode == "enforce" else "privileged"
        minor = _version(labels.get(f"{PREFIX}{mode}-version", "latest"))
        modes[mode] = LevelVersion(level, minor)
    enforce, warn = modes["enforce"], modes["warn"]
    enforce_set = labels.get(PREFIX + "enforce") in LEVELS
    if PREFIX + "warn" not in labels and enforce_set and _stricter(enforce.level, warn.level):
        minor = warn.minor if f"{PREFIX}warn-version" in labels else enforce.minor
        modes["warn"] = LevelVersion(enforce.level, minor)
    return Policy(**modes)


def _stricter(a: str, b: str) -> bool:
    return LEVELS.index(a) > LEVELS.index(b)


def evaluate(lv: LevelVersion, pod: Obj) -> list[tuple[str, str]]:
    """The failed checks of ``pod`` at ``lv``, as (reason, detail), in upstream's order."""
    if lv.level == "privileged":
        return []
    minor = LATEST_MINOR if lv.minor is None else lv.minor
    levels = ("baseline",) if lv.level == "baseline" else ("baseline", "restricted")
    active = {c.id: fn for c in CHECKS if c.level in levels and (fn := c.at(minor)) is not None}
    for c in CHECKS:
        if c.level == "restricted" and c.id in active:
            for replaced in c.overrides:
                active.pop(replaced, None)
    meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
    order = sorted(i for i in active if _level_of(i) == "baseline")
    order += sorted(i for i in active if _level_of(i) == "restricted")
    results: list[Result] = [active[i](meta, spec) for i in order]
    return [r for r in results if r is not None]


def _level_of(check_id: str) -> str:
    return next(c.level for c in CHECKS if c.id == check_id)


def _detail(failed: list[tuple[str, str]]) -> str:
    return ", ".join(f"{reason} ({detail})" if detail else reason for reason, detail in failed)


def refusal(policy: Policy, pod: Obj) -> str | None:
    """Why ``pod`` is forbidden by the `enforce` level (the 403's text after the name)."""
    failed = evaluate(policy.enforce, pod)
    return f'violates PodSecurity "{policy.enforce}": {_detail(failed)}' if failed else None


def significant_update(new: Obj, old: Obj) -> bool:
    """An update that can change what the checks see: a container image or the set of
    containers (everything else security-relevant in a pod's spec is immutable)."""
    ns, os_ = new.get("spec") or {}, old.get("spec") or {}
    for key in ("containers", "initContainers"):
        a, b = ns.get(key) or [], os_.get(key) or []
        if len(a) != len(b) or any(
            x.get("image") != y.get("image") for x, y in zip(a, b, strict=True)
        ):
            return True
    old_ephemeral = {c.get("name"): c for c in os_.get("ephemeralContainers") or []}
    return any(
        c.get("name") not in old_ephemeral
        or c.get("image") != old_ephemeral[c.get("name")].get("image")
        for c in ns.get("ephemeralContainers") or []
    )
