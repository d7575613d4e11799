"""The sandbox contract's names, in one place: what makes a Pod a Sandman sandbox.

The facade writes them (facade/podspec.py renders the Pod, golden-tested), the
controller reads them (the binder selects on the scheduler name, the garbage collector on
labels and annotations). Changing one is a wire-compatibility change for running clusters.
"""

from __future__ import annotations

__all__ = [
    "ANNOTATION_ATTEMPT",
    "ANNOTATION_EXPIRES_AT",
    "ANNOTATION_GROUP",
    "ANNOTATION_GROUP_SIZE",
    "ANNOTATION_IDLE_TIMEOUT",
    "ANNOTATION_REPLACES",
    "ANNOTATION_REQUEST_DIGEST",
    "LABEL_CLASS",
    "LABEL_OWNER",
    "LABEL_SANDBOX",
    "LABEL_TENANT",
    "SCHEDULER_NAME",
]

SCHEDULER_NAME = "sandman"
LABEL_SANDBOX = "sandman.io/sandbox"
LABEL_TENANT = "sandman.io/tenant"
LABEL_OWNER = "sandman.io/owner"
LABEL_CLASS = "sandman.io/class"
ANNOTATION_EXPIRES_AT = "sandman.io/expires-at"
ANNOTATION_IDLE_TIMEOUT = "sandman.io/idle-timeout-seconds"
ANNOTATION_REPLACES = "sandman.io/replaces"
ANNOTATION_ATTEMPT = "sandman.io/attempt"
#: Digest of the trainer's create request: an Idempotency-Key replayed with another spec is
#: refused instead of silently returning a different sandbox (facade/service.py).
ANNOTATION_REQUEST_DIGEST = "sandman.io/request-digest"
#: A batch's group (its name) and size: its pods are placed all or nothing, on as few nodes
#: as fit (scheduler/gang.py; scheduler.decoder spells the same strings).
ANNOTATION_GROUP = "sandman.io/group"
ANNOTATION_GROUP_SIZE = "sandman.io/group-size"
#: A random value drawn once per pod: the sandbox's token is derived from it too
#: (facade/tokens.py), so a sandbox re-created under the same name gets another token.
ANNOTATION_TOKEN_SALT = "sandman.io/token-salt"
