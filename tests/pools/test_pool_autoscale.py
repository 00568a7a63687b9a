"""Demand autoscaling as a pure decision, the demand it measures, and the demand book it reads."""

from __future__ import annotations

import datetime

import pytest

from egress_proxies.clock import ManualClock
from egress_proxies.pool_model import Autoscale, Demand
from egress_proxies.pools.autoscale import (
    AT_MAX,
    DOWN,
    UP,
    Carrier,
    ScaleInput,
    decide,
    pool_demand,
    utilization_percent,
)
from egress_proxies.pools.demand import DemandBook
from egress_proxies.values import proxy_key

pytestmark = pytest.mark.unit

POLICY = Autoscale(
    min_replicas=1,
    max_replicas=4,
    target_utilization_percent=80,
    scale_up_on_waiting=2,
    scale_down_delay_seconds=30,
    min_idle=1,
)


def seen(
    replicas: int,
    leases: int,
    capacity: int,
    *,
    waiting: int = 0,
    busy: int | None = None,
    settled: bool = True,
    low_use_since: float | None = None,
    now: float = 1000.0,
) -> ScaleInput:
    """The autoscaler's input (`leases` all for one target), times in seconds since the epoch."""
    demand = Demand(
        active_leases=leases,
        capacity=capacity,
        busiest_target_leases=leases,
        waiting_per_minute=waiting,
    )
    return ScaleInput(
        replicas=replicas,
        demand=demand,
        busy=leases if busy is None else busy,
        settled=settled,
        low_use_since=None if low_use_since is None else at(low_use_since),
        now=at(now),
    )


def at(seconds: float) -> datetime.datetime:
    return datetime.datetime.fromtimestamp(seconds, datetime.UTC)


def test_full_utilization_scales_up_by_a_step() -> None:
    decision = decide(POLICY, seen(2, 2, 2))
    assert (decision.replicas, decision.reason) == (3, UP)
    assert "utilization 100%" in decision.message


def test_waiting_requests_scale_up_below_the_target_utilization() -> None:
    lenient = POLICY.model_copy(update={"target_utilization_percent": 100})
    assert decide(lenient, seen(2, 2, 3, waiting=5)).replicas == 2  # a lease is free: no step
    assert decide(lenient, seen(2, 2, 2, waiting=2)).replicas == 3  # none free, two waited
    assert decide(lenient, seen(1, 0, 0, waiting=2)).replicas == 2  # nothing Ready yet


def test_no_new_step_while_the_last_one_is_starting() -> None:
    decision = decide(POLICY, seen(2, 2, 2, settled=False))
    assert (decision.replicas, decision.reason) == (2, None)


def test_at_max_the_pool_reports_scaling_limited() -> None:
    decision = decide(POLICY, seen(4, 4, 4, waiting=10))
    assert (decision.replicas, decision.reason, decision.limited) == (4, None, AT_MAX)


def test_low_use_scales_down_only_after_the_delay_keeping_min_idle() -> None:
    first = decide(POLICY, seen(4, 1, 4, now=1000.0))
    assert (first.replicas, first.reason, first.low_use_since) == (4, None, at(1000.0))
    waiting = decide(POLICY, seen(4, 1, 4, low_use_since=1000.0, now=1029.0))
    assert waiting.reason is None and waiting.low_use_since == at(1000.0)
    down = decide(POLICY, seen(4, 1, 4, low_use_since=1000.0, now=1030.0))
    assert (down.replicas, down.reason) == (2, DOWN)  # one busy + minIdle 1


def test_returning_demand_resets_the_low_use_clock() -> None:
    decision = decide(POLICY, seen(3, 3, 3, low_use_since=1000.0, now=1020.0))
    assert decision.low_use_since is None and decision.reason == UP


def test_no_demand_goes_back_to_min_replicas() -> None:
    down = decide(POLICY, seen(4, 0, 4, low_use_since=0.0, now=1000.0))
    assert down.replicas == 1


def test_replicas_outside_the_bounds_are_brought_inside() -> None:
    assert decide(POLICY, seen(9, 0, 9)).replicas == 4


def carriers(*leases: dict[str | None, int], max_leases: int = 1) -> list[Carrier]:
    """Ready members with these leases per target, `maxLeases` each, no `maxTargets`."""
    return [Carrier(max_leases, None, held) for held in leases]


def on_demand(found: Demand, replicas: int = 4) -> ScaleInput:
    return ScaleInput(replicas, found, busy=replicas, settled=True, low_use_since=None, now=at(0))


def test_a_broad_crawl_holding_every_pair_is_at_full_utilization_not_above() -> None:
    every_site: dict[str | None, int] = {"a": 1, "b": 1, "c": 1}
    found = pool_demand(carriers(*[every_site] * 4), active_leases=12, waiting_per_minute=0)
    assert (found.capacity, found.busiest_target_leases) == (4, 4)
    assert utilization_percent(found) == 100.0
    assert decide(POLICY.model_copy(update={"max_replicas": 8}), on_demand(found)).reason == UP


def test_sites_spread_over_part_of_the_pool_leave_room_and_do_not_scale_up() -> None:
    # Six leases on four proxies (150 % of their maxLeases), but each site holds two of
    # four pairs: every one of them can still spread.
    found = pool_demand(
        carriers({"a": 1}, {"a": 1, "b": 1}, {"b": 1, "c": 1}, {"c": 1}),
        active_leases=6,
        waiting_per_minute=10,
    )
    assert (found.active_leases, found.busiest_target_leases) == (6, 2)
    assert utilization_percent(found) == 50.0
    decision = decide(POLICY.model_copy(update={"max_replicas": 8}), on_demand(found))
    assert (decision.replicas, decision.reason) == (4, None), "waits at room are answered there"


def test_shared_pairs_count_up_to_max_leases_and_leases_without_a_target_are_one_target() -> None:
    found = pool_demand(
        carriers({"a": 2, None: 1}, {"a": 1, None: 2}, {}, max_leases=2),
        active_leases=6,
        waiting_per_minute=0,
    )
    assert (found.capacity, found.busiest_target_leases) == (6, 3)
    assert utilization_percent(found) == 50.0


def test_exclusive_proxies_are_full_for_every_other_target() -> None:
    # maxTargets 1, maxLeases 1: a proxy held for one site has no room for another, so
    # utilization is leases ÷ proxies, as before capacity was per pair.
    exclusive = [Carrier(1, 1, {site: 1}) for site in "abc"] + [Carrier(1, 1, {})]
    found = pool_demand(exclusive, active_leases=3, waiting_per_minute=0)
    assert (found.capacity, found.busiest_target_leases) == (4, 3)
    assert utilization_percent(found) == 75.0
    full = pool_demand([*exclusive[:3], Carrier(1, 1, {"d": 1})], 4, waiting_per_minute=2)
    lenient = POLICY.model_copy(update={"target_utilization_percent": 100, "max_replicas": 8})
    assert decide(lenient, on_demand(full)).reason == UP


def test_no_leases_no_demand() -> None:
    found = pool_demand(carriers({}, {}), active_leases=0, waiting_per_minute=0)
    assert (found.capacity, found.busiest_target_leases, utilization_percent(found)) == (2, 0, 0)


def test_demand_book_counts_within_a_window() -> None:
    clock = ManualClock(wall=datetime.datetime.fromtimestamp(100.0, datetime.UTC))
    book = DemandBook(clock=clock, horizon=50)
    key = proxy_key("ns", "p")
    book.banned(key)
    clock.advance(20)
    book.banned(key)
    book.waited(frozenset({"ns/pool"}))
    assert book.bans_since(key, 110.0) == 1
    assert book.bans_since(key, 0.0) == 2
    assert book.waits_since("ns/pool", 0.0) == 1
    assert book.waits_since("ns/other", 0.0) == 0
    clock.advance(80)
    book.banned(key)  # the two older bans fell past the horizon
    assert book.bans_since(key, 0.0) == 1
    assert repr(book) == "<DemandBook [bans: 1 on 1 proxies | waits: 1]>"
    book.forget_proxy(key)
    assert book.bans_since(key, 0.0) == 0
