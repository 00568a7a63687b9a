"""DomainSpread's decisions: which lease goes next, when to grow, what to give back."""

from __future__ import annotations

from dataclasses import dataclass

from egress_proxies_client.spread import DomainSpread


@dataclass
class FakeLease:
    """A lease reduced to what the spread reads: an id and its next turn."""

    lease_id: str
    turn: float = 0.0

    def next_turn(self) -> float:
        return self.turn


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


def test_idle_leases_are_given_back_and_refused_ones_taken_out() -> None:
    spread: DomainSpread[FakeLease] = DomainSpread(most=3, idle=30)
    old, busy, banned = FakeLease("old"), FakeLease("busy"), FakeLease("banned")
    for lease in (old, busy, banned):
        spread.add(lease, now=0)
    spread.used(busy, now=20)
    assert spread.remove("banned") is banned and spread.remove("banned") is None
    assert spread.idle_leases(now=30) == [old]
    assert spread.leases == [busy]
