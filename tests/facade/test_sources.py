"""Sandbox sources tried in turn (facade/sources.py): a member is handed on until a source
takes it, and then to no other; what a source leaves, and only that, is what the next one
is handed, as it was left; a source that answers a member it was not handed, answers one
twice or loses one is a bug, refused at once rather than answered wrongly."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import pytest
from hypothesis import given
from hypothesis import strategies as st

from facade.errors import FacadeError
from facade.order import Member, Order, Outcome, Refused, Written
from facade.sources import SandboxSource, Supply, supply_in_turn
from facade.tenancy import Tenant
from sandman.wire.errors import Reason
from sandman.wire.facade import Sandbox

pytestmark = pytest.mark.anyio

TENANT = Tenant("t1", "sandman-t1", max_sandboxes=100, create_rate_per_s=100, create_burst=100)


def order_of(n: int) -> Order:
    return Order(TENANT, tuple(Member(i, {"metadata": {"name": f"sb-{i}"}}) for i in range(n)))


def written_by(source: str, member: Member) -> Written:
    """An outcome that says which source wrote it (in the sandbox's owner)."""
    sandbox = Sandbox(
        id=member.name, owner=source, sandbox_class="tiny", image="i", state="pending"
    )
    return Written(sandbox, created=True)


@dataclass
class Taking:
    """Takes the members ``takes`` picks (written, or refused when ``refuse``) and leaves the
    rest, marked prepaid; records what it was handed."""

    name: str
    takes: Callable[[Member], bool]
    refuse: bool = False
    handed: list[tuple[Member, ...]] = field(default_factory=list)

    async def supply(self, order: Order) -> Supply:
        self.handed.append(order.members)
        outcomes: dict[int, Outcome] = {
            m.index: self._outcome(m) for m in order.members if self.takes(m)
        }
        left = tuple(
            Member(m.index, m.pod, prepaid=True) for m in order.members if not self.takes(m)
        )
        return Supply(outcomes, left)

    def _outcome(self, member: Member) -> Outcome:
        if self.refuse:
            return Refused(FacadeError("full", reason=Reason.QUOTA_EXCEEDED, retry_after_s=1.0))
        return written_by(self.name, member)


def everything(m: Member) -> bool:
    return True


def nothing(m: Member) -> bool:
    return False


def writers(outcomes: dict[int, Outcome]) -> dict[int, str]:
    return {i: o.sandbox.owner for i, o in outcomes.items() if isinstance(o, Written)}


async def test_a_source_that_supplies_nothing_leaves_everything_to_the_next() -> None:
    idle, last = Taking("idle", nothing), Taking("last", everything)
    outcomes = await supply_in_turn([idle, last], order_of(4))
    assert writers(outcomes) == {0: "last", 1: "last", 2: "last", 3: "last"}
    assert [len(h) for h in idle.handed] == [4]
    assert [m.index for m in last.handed[0]] == [0, 1, 2, 3]


async def test_the_next_source_is_handed_what_was_left_as_it_was_left() -> None:
    evens, last = Taking("evens", lambda m: m.index % 2 == 0), Taking("last", everything)
    outcomes = await supply_in_turn([evens, last], order_of(5))
    assert writers(outcomes) == {0: "evens", 1: "last", 2: "evens", 3: "last", 4: "evens"}
    (left,) = last.handed
    assert [(m.index, m.prepaid) for m in left] == [(1, True), (3, True)]


async def test_a_refused_member_is_answered_and_not_handed_on() -> None:
    """A refusal is an answer (data), not a reason to try the next source."""
    refusing, last = (
        Taking("refusing", lambda m: m.index == 0, refuse=True),
        Taking("last", everything),
    )
    outcomes = await supply_in_turn([refusing, last], order_of(2))
    assert isinstance(outcomes[0], Refused) and outcomes[0].error.reason == "quota_exceeded"
    assert [m.index for m in last.handed[0]] == [1]


async def test_once_every_member_is_taken_the_later_sources_are_not_asked() -> None:
    first, second = Taking("first", everything), Taking("second", everything)
    await supply_in_turn([first, second], order_of(3))
    assert second.handed == []


@dataclass
class Broken:
    """Answers members as ``supply_with`` says, whatever it was handed."""

    supply_with: Callable[[Order], Supply]

    async def supply(self, order: Order) -> Supply:
        return self.supply_with(order)


@pytest.mark.parametrize(
    "broken",
    [
        lambda o: Supply({0: written_by("x", o.members[0])}, o.members),  # answered and left
        lambda o: Supply({}, o.members[1:]),  # member 0 lost
        lambda o: Supply({9: written_by("x", o.members[0])}, o.members),  # one never handed
    ],
    ids=["answered-and-left", "lost", "not-handed"],
)
async def test_a_source_that_breaks_the_rule_is_refused(broken: Callable[[Order], Supply]) -> None:
    with pytest.raises(RuntimeError, match="each must be answered or left, once"):
        await supply_in_turn([Broken(broken), Taking("last", everything)], order_of(2))


async def test_members_that_no_source_took_are_an_error_not_a_silent_gap() -> None:
    with pytest.raises(RuntimeError, match=r"no source supplied members \[0, 1\]"):
        await supply_in_turn([Taking("idle", nothing)], order_of(2))


@given(
    count=st.integers(min_value=1, max_value=30),
    takes=st.lists(st.frozensets(st.integers(min_value=0, max_value=29)), max_size=4),
)
async def test_each_member_is_written_by_the_first_source_that_takes_it(
    count: int, takes: list[frozenset[int]]
) -> None:
    """Whatever each source takes: every member is answered once, by the first source that
    takes it; each source is handed exactly the members the ones before it left."""
    sources: Sequence[Taking] = [
        *(Taking(f"s{k}", lambda m, t=t: m.index in t) for k, t in enumerate(takes)),
        Taking("last", everything),
    ]
    chain: Sequence[SandboxSource] = sources
    outcomes = await supply_in_turn(chain, order_of(count))
    assert sorted(outcomes) == list(range(count))
    untaken = set(range(count))
    for source, taken in zip(sources, [*takes, frozenset(range(count))], strict=True):
        handed = {m.index for h in source.handed for m in h}
        assert handed == untaken, source.name
        mine = {i for i, name in writers(outcomes).items() if name == source.name}
        assert mine == untaken & taken
        untaken -= taken
