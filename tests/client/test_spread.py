"""DomainSpread's decisions: which lease goes next, when to grow, what to give back."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from egress_proxies_client.spread import DomainSpread

pytestmark = pytest.mark.client


@dataclass
class FakeLease:
    """A lease reduced to what the spread reads: an id, its next turn, who waits."""

    lease_id: str
    turn: float = 0.0
    waiting: int | None = None

    def next_turn(self) -> float:
        return self.turn

    def waiting_held(self) -> int | None:
        return self.waiting


def test_the_lease_with_the_first_turn_goes_next() -> None:
    spread: DomainSpread[FakeLease] = DomainSpread(most=3, idle=30)
    assert spread.best() is None and spread.should_grow(None, now=0)
    late, soon = FakeLease("late", 0.8), FakeLease("soon", 0.1)
    spread.add(late, now=0)
    spread.add(soon, now=0)
    assert spread.best() is soon
    assert repr(spread) == "<DomainSpread [leases: 2/3]>"


def test_it_grows_only_while_every_lease_is_busy_up_to_its_bound() -> None:
    spread: DomainSpread[FakeLease] = DomainSpread(most=2, idle=30)
    free = FakeLease("a", 0.0)
    spread.add(free, now=0)
    assert not spread.should_grow(free, now=0), "a turn is free now"
    free.turn = 0.5
    assert spread.should_grow(free, now=0)
    spread.hold_back(until=5)
    assert not spread.should_grow(free, now=4), "the site or the API said to slow down"
    assert spread.should_grow(free, now=5)
    spread.add(FakeLease("b", 0.5), now=5)
    assert not spread.should_grow(spread.best(), now=5), "at its bound"


def test_without_a_bound_it_grows_while_every_lease_is_busy() -> None:
    spread: DomainSpread[FakeLease] = DomainSpread(most=None, idle=30)
    for index in range(50):
        spread.add(FakeLease(f"l{index}", 0.2), now=0)
    assert spread.should_grow(spread.best(), now=0), "the API says when the fleet is full"
    assert repr(spread) == "<DomainSpread [leases: 50/any]>"
    spread.add(FakeLease("free", 0.0), now=0)
    assert not spread.should_grow(spread.best(), now=0)


def test_idle_leases_are_given_back_and_refused_ones_taken_out() -> None:
    spread: DomainSpread[FakeLease] = DomainSpread(most=3, idle=30)
    old, busy, banned = FakeLease("old"), FakeLease("busy"), FakeLease("banned")
    for lease in (old, busy, banned):
        spread.add(lease, now=0)
    spread.used(busy, now=20)
    assert spread.remove("banned") is banned and spread.remove("banned") is None
    assert spread.idle_leases(now=30) == [old]
    assert spread.leases == [busy]


def test_a_lease_goes_to_a_waiting_crawler_holding_fewer_until_the_shares_are_even() -> None:
    spread: DomainSpread[FakeLease] = DomainSpread(most=4, idle=30)
    leases = [FakeLease(name, 0.5) for name in "abcd"]
    for lease in leases:
        spread.add(lease, now=0)
    assert spread.yielded(now=0) is None, "nobody waits"
    leases[0].waiting = 0
    assert spread.yielded(now=1) is leases[3], "the newest goes"
    assert len(spread.leases) == 3
    assert not spread.should_grow(spread.best(), now=10), "it leases no more for a while"
    assert spread.should_grow(spread.best(), now=11)
    for lease in leases:
        lease.waiting = 1
    assert spread.yielded(now=2) is None, "one at a time: the news of it takes a while"
    assert spread.yielded(now=4) is leases[2], "3 against 1: one more"
    for lease in leases:
        lease.waiting = 2
    assert spread.yielded(now=8) is None, "2 against 2 is even"
    leases[0].waiting = leases[1].waiting = 1
    assert spread.yielded(now=12) is None, "2 against 1 is as even as 3 proxies allow"
