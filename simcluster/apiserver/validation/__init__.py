"""Field validation as the real API server does it: ``field.ErrorList`` → 422 Invalid.

Every scale figure of Sandman comes from simcluster, so a rule where it is more lenient than
a real server hides a bug (an object that passes here and gets 422 on a real cluster). These
modules hold upstream's rules as pure functions over the decoded JSON object, each returning
the causes it finds (reason, field path, message, all worded as upstream's ``field.Error``)
so that one request gets every cause at once, as ``NewInvalid`` reports them:

- ``fields``: the primitives (``IsDNS1123Label``, ``IsQualifiedName``, label values, ...);
- ``objectmeta``: ``ValidateObjectMeta`` and ``ValidateObjectMetaUpdate`` (labels,
  annotations, finalizers, ownerReferences, no new finalizers while deleting);
- ``podspec``: ``ValidatePodSpec``'s rules a pod writer can trip (containers, enums, ports,
  env, volumes, tolerations, resources);
- ``decode``: what upstream refuses while decoding into its typed structs (400, not 422):
  malformed quantities, non-string ConfigMap values, non-base64 Secret data;
- ``kinds``: the per-kind rules of the other kinds Sandman and operators write (ConfigMap,
  Secret, Lease, Event, ResourceQuota, RBAC, APF).

Why not the OpenAPI schemas (``kubernetes-validate``): they express types and required
fields only, not these rules (name formats, uniqueness, requests ≤ limits, immutability),
and cost milliseconds per object (BENCHMARKS.md), past the 1 ms per create the burst allows.
"""

from __future__ import annotations

__all__: list[str] = []
