"""The pod writer: every sandbox pod's create, and what the API server's answer means.

Every source writes through it (facade/sources.py), so the meaning of an answer is written
once, whichever way the pod was sent:

- created: the sandbox, noted in the watch cache at once (read-your-writes: the next get
  finds it before the watch event arrives), counted by how it was sent;
- **AlreadyExists**: a retry of a create that landed (ours, another replica's, or a lost
  response): the existing pod, if its digest is this request's (facade/idempotency.py),
  else 409 ``idempotency_key_reused``;
- **Forbidden**: a ResourceQuota's 429 ``quota_exceeded``, or — the facade's RBAC lacks
  ``create`` on pods in the tenant's namespace — the operator's to fix, not the trainer's:
  a 502 ``cluster_forbidden`` and an error in the facade's log naming the 403;
- a placement that ran out before the create could be sent (``send_by`` passed): not sent,
  the member handed back ``late``, for the source to ask again or leave.

Why answers and not exceptions: the writer is the bottom of the create path and never calls
back up; what it found is returned as a value (an :class:`~facade.order.Outcome` per member,
and the late members), and the source that called it decides what follows.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final, overload

from kube import PODS, AlreadyExists, Forbidden, KubeClient, KubeError, SendDeadlinePassed
from kube.cache import Obj
from kube.contract import ANNOTATION_REQUEST_DIGEST
from kube.placement import Placement
from sandman.wire.errors import Reason

from .errors import FacadeError, from_kube_error
from .idempotency import reused_key
from .index import SandboxIndex
from .metrics import FacadeMetrics
from .order import Member, Outcome, Refused, Written, concurrently
from .tenancy import Tenant

__all__ = ["PRE_PLACED", "UNBOUND", "UNBOUND_LATE", "PodWriter"]

log = logging.getLogger(__name__)

#: How a create was sent: the label values of ``sandman_facade_pod_creates_total{placement}``
#: (on its node; unbound; unbound because its placement ran out).
PRE_PLACED: Final = "pre-placed"
UNBOUND: Final = "unbound"
UNBOUND_LATE: Final = "unbound-late"


@dataclass(frozen=True, slots=True)
class _RanOut:
    """Not sent: the pod's placement ran out first."""


_RAN_OUT: Final = _RanOut()


class PodWriter:
    """Members' pods created :meth:`on_nodes` or :meth:`unbound`; each answered."""

    def __init__(self, client: KubeClient, index: SandboxIndex, metrics: FacadeMetrics) -> None:
        self.client = client
        self.index = index
        self.metrics = metrics

    async def on_nodes(
        self, tenant: Tenant, members: Sequence[Member], placements: Mapping[str, Placement]
    ) -> tuple[dict[int, Outcome], tuple[Member, ...]]:
        """Every member's create at once on its placement's node, its token taken already
        (``KubeClient.take_tokens``): the outcomes by member index, and the members whose
        placement ran out before their create could be sent (``late``, not sent)."""
        sent = await concurrently(
            [self._write(tenant, m.pod, PRE_PLACED, True, placements[m.name]) for m in members]
        )
        outcomes: dict[int, Outcome] = {}
        late: list[Member] = []
        for member, answer in zip(members, sent, strict=True):
            if isinstance(answer, _RanOut):
                late.append(Member(member.index, member.pod, late=True))
            else:
                outcomes[member.index] = answer
        return outcomes, tuple(late)

    async def unbound(
        self, tenant: Tenant, members: Sequence[Member], concurrency: int
    ) -> dict[int, Outcome]:
        """Every member's create unbound, at most ``concurrency`` at once, as it was left:
        ``prepaid`` with its token taken already, counted ``unbound-late`` if ``late``."""
        limit = asyncio.Semaphore(concurrency)

        async def write(m: Member) -> Outcome:
            label = UNBOUND_LATE if m.late else UNBOUND
            if len(members) == 1:  # alone: nothing to limit
                return await self._write(tenant, m.pod, label, m.prepaid)
            async with limit:
                return await self._write(tenant, m.pod, label, m.prepaid)

        answers = await concurrently([write(m) for m in members])
        return {m.index: answer for m, answer in zip(members, answers, strict=True)}

    @overload
    async def _write(
        self, tenant: Tenant, pod: Obj, label: str, prepaid: bool, placement: None = None
    ) -> Outcome: ...
    @overload
    async def _write(
        self, tenant: Tenant, pod: Obj, label: str, prepaid: bool, placement: Placement
    ) -> Outcome | _RanOut: ...
    async def _write(
        self,
        tenant: Tenant,
        pod: Obj,
        label: str,
        prepaid: bool,
        placement: Placement | None = None,
    ) -> Outcome | _RanOut:
        """Create ``pod``: on ``placement``'s node if given (sent by its ``send_by``, else
        not at all), unbound otherwise; ``label``: how it was sent, for the metric."""
        ns, created = tenant.namespace, True
        try:
            there = await self._post(ns, pod, prepaid, placement)
        except SendDeadlinePassed:
            self.metrics.placements_ran_out.inc()
            return _RAN_OUT
        except AlreadyExists:
            # A retry of a create that landed (ours, another replica's, or a lost response).
            found, created = await self._existing(ns, pod), False
            if isinstance(found, Refused):
                return found
            there = found
        except Forbidden as e:
            return Refused(_quota_or_forbidden(e))
        except KubeError as e:
            return Refused(from_kube_error(e, "creating the sandbox pod"))
        if created:
            self.metrics.creates.labels(label).inc()
            self.metrics.created.labels(tenant.name).inc()
        return Written(self.index.note_created(there), created)

    async def _post(self, ns: str, pod: Obj, prepaid: bool, placement: Placement | None) -> Obj:
        body, send_by = pod, None
        if placement is not None:
            body = {**pod, "spec": {**pod["spec"], "nodeName": placement.node}}
            send_by = placement.send_by
        created: Obj = await self.client.request(
            "POST",
            PODS.path(ns),
            body=body,
            idempotent=True,
            send_by=send_by,
            prepaid=prepaid,
            lean=True,  # checks send_by with the connection in hand (kube/lean.py)
        )
        return created

    async def _existing(self, ns: str, pod: Obj) -> Obj | Refused:
        """The pod a create found there, if this request's (the replay check before the
        create read the watch cache: this one it has not seen, so it is read from the API
        server); a key reused by another request, or the read failing, refused."""
        try:
            existing: Obj = await self.client.get(PODS, pod["metadata"]["name"], ns)
        except KubeError as e:
            return Refused(from_kube_error(e, "reading the existing sandbox pod"))
        reused = reused_key(existing, pod["metadata"]["annotations"][ANNOTATION_REQUEST_DIGEST])
        return existing if reused is None else Refused(reused)


def _quota_or_forbidden(e: Forbidden) -> FacadeError:
    if "exceeded quota" in str(e):
        return FacadeError(e.message, reason=Reason.QUOTA_EXCEEDED, retry_after_s=5.0)
    log.error("sandbox create forbidden (403): the facade's RBAC lacks create on pods: %s", e)
    return FacadeError(f"the API server refused the create: {e}", reason=Reason.CLUSTER_FORBIDDEN)
