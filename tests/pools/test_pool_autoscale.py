"""Demand autoscaling as a pure decision, and the demand book it reads."""

from __future__ import annotations

import datetime

import pytest

from egress_proxies.clock import ManualClock
from egress_proxies.pool_model import Autoscale, Demand
from egress_proxies.pools.autoscale import AT_MAX, DOWN, UP, ScaleInput, decide
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
    """The autoscaler's input, its times in seconds since the epoch."""
    return ScaleInput(
        replicas=replicas,
        demand=Demand(active_leases=leases, capacity=capacity, waiting_per_minute=waiting),
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
