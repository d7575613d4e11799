"""The create path (facade/create.py) with sources that record what they are handed: a
batch's first member goes through the sources alone before any other, a single create is
the same path as a batch of one, a key reused by another request refuses the whole batch
while only its first member was tried, and the answer is built from the members' outcomes
alone (a refusal is a batch's ``failed`` entry, a single create's error)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from facade.create import CreatePath
from facade.errors import FacadeError
from facade.index import SandboxIndex
from facade.metrics import FacadeMetrics
from facade.order import Member, Order, Outcome, Refused, Written
from facade.podspec import DaemonDelivery, SandboxClass
from facade.sources import Supply
from facade.tenancy import Tenant, TenantDirectory
from facade.tokens import TokenMinter
from kube.contract import ANNOTATION_GROUP, ANNOTATION_GROUP_SIZE, ANNOTATION_REQUEST_DIGEST
from sandman.wire.errors import Reason
from sandman.wire.facade import CreateBatch, CreateSandbox, Sandbox

pytestmark = pytest.mark.anyio

TENANT = Tenant("t1", "sandman-t1", max_sandboxes=100, create_rate_per_s=1000, create_burst=100)
SPEC = CreateSandbox(image="registry.local/task:1", owner="run-1")
REUSED = FacadeError("used for a different request", reason=Reason.IDEMPOTENCY_KEY_REUSED)


@dataclass
class Recording:
    """Writes every member it is handed, except those ``refuse`` answers for."""

    refuse: dict[int, FacadeError] = field(default_factory=dict)
    handed: list[Order] = field(default_factory=list)

    async def supply(self, order: Order) -> Supply:
        self.handed.append(order)
        return Supply({m.index: self._outcome(m) for m in order.members})

    def _outcome(self, member: Member) -> Outcome:
        if member.index in self.refuse:
            return Refused(self.refuse[member.index])
        sandbox = Sandbox(
            id=member.name, owner="run-1", sandbox_class="tiny", image="i", state="pending"
        )
        return Written(sandbox, created=True)


def path_with(source: Recording) -> CreatePath:
    return CreatePath(
        SandboxIndex(),
        TenantDirectory({"digest": TENANT}),
        {"tiny": SandboxClass("tiny")},
        DaemonDelivery("host-path"),
        TokenMinter(b"s" * 32),
        FacadeMetrics(),
        [source],
    )


def without_env(spec: dict[str, Any]) -> dict[str, Any]:
    """A pod spec less its containers' env (the daemon token differs with the name)."""
    containers = [{k: v for k, v in c.items() if k != "env"} for c in spec["containers"]]
    return {**spec, "containers": containers}


def handed(source: Recording) -> list[list[int]]:
    return [[m.index for m in order.members] for order in source.handed]


async def test_a_batchs_first_member_goes_alone_before_the_rest() -> None:
    source = Recording()
    result = await path_with(source).create_batch(TENANT, CreateBatch(spec=SPEC, count=4), "k1")
    assert handed(source) == [[0], [1, 2, 3]]
    assert len(result.sandboxes) == 4 and result.failed == []


async def test_a_single_create_is_the_path_of_a_batch_of_one() -> None:
    single, batch = Recording(), Recording()
    sandbox, created = await path_with(single).create(TENANT, SPEC, "k1")
    await path_with(batch).create_batch(TENANT, CreateBatch(spec=SPEC, count=1), "k1")
    assert handed(single) == handed(batch) == [[0]]
    assert created and sandbox.id == single.handed[0].members[0].name
    (one,), (other,) = single.handed[0].members, batch.handed[0].members
    assert without_env(one.pod["spec"]) == without_env(other.pod["spec"])
    # Different requests (a spec, a batch of one): different names and digests.
    assert one.name != other.name
    digests = {m.pod["metadata"]["annotations"][ANNOTATION_REQUEST_DIGEST] for m in (one, other)}
    assert len(digests) == 2


async def test_a_key_reused_by_another_request_refuses_the_batch_with_one_member_tried() -> None:
    source = Recording(refuse={0: REUSED})
    with pytest.raises(FacadeError) as refused:
        await path_with(source).create_batch(TENANT, CreateBatch(spec=SPEC, count=5), "k1")
    assert (refused.value.status, refused.value.reason) == (409, "idempotency_key_reused")
    assert handed(source) == [[0]]


async def test_other_refusals_are_the_members_own_answers() -> None:
    full = FacadeError("the namespace's quota", reason=Reason.QUOTA_EXCEEDED, retry_after_s=5.0)
    source = Recording(refuse={0: full, 2: REUSED})
    result = await path_with(source).create_batch(TENANT, CreateBatch(spec=SPEC, count=3), "k1")
    assert handed(source) == [[0], [1, 2]]
    assert [(f.index, f.status, f.reason, f.retry_after_s) for f in result.failed] == [
        (0, 429, "quota_exceeded", 5.0),
        (2, 409, "idempotency_key_reused", None),
    ]
    assert [s.id for s in result.sandboxes] == [source.handed[1].members[0].name]


async def test_a_single_creates_refusal_is_its_answer() -> None:
    source = Recording(refuse={0: FacadeError("down", reason=Reason.CLUSTER_UNAVAILABLE)})
    with pytest.raises(FacadeError) as refused:
        await path_with(source).create(TENANT, SPEC, None)
    assert refused.value.reason == "cluster_unavailable"


async def test_a_group_travels_with_its_order_and_on_its_pods() -> None:
    source = Recording()
    batch = CreateBatch(spec=SPEC, count=3, group="g1")
    await path_with(source).create_batch(TENANT, batch, "k1")
    assert [order.group for order in source.handed] == ["g1", "g1"]
    for order in source.handed:
        for member in order.members:
            annotations = member.pod["metadata"]["annotations"]
            assert (annotations[ANNOTATION_GROUP], annotations[ANNOTATION_GROUP_SIZE]) == (
                "g1",
                "3",
            )


async def test_admission_and_the_class_refuse_before_any_source_is_handed_a_member() -> None:
    source = Recording()
    path = path_with(source)
    with pytest.raises(FacadeError) as unknown:
        await path.create(TENANT, CreateSandbox(image="i", owner="o", sandbox_class="huge"), None)
    with pytest.raises(FacadeError) as too_large:
        await path.create_batch(TENANT, CreateBatch(spec=SPEC, count=101), None)
    assert (unknown.value.status, unknown.value.reason) == (400, "unknown_class")
    assert (too_large.value.status, too_large.value.reason) == (400, "batch_too_large")
    assert source.handed == []
