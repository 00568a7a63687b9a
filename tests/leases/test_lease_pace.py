"""The pace suite, run against both stores: memory and a real redis-server.

Slow start on `ok` counts, multiplicative decrease on rate limits (held through
the site's Retry-After), the climb back to a cruise below the remembered limit,
the probe above it, the floor and the ceiling, where a proxy new to a target
starts, the per-target bounds, and (Redis) a pace kept across a restart.
"""

from __future__ import annotations

from typing import Any

import pytest
from redis.asyncio import Redis

from egress_proxies.clock import ManualClock
from egress_proxies.leases import (
    Lease,
    LeaseId,
    LeaseLimits,
    LeaseStore,
    Pace,
    PaceLimits,
    RedisLeaseStore,
    ReportResult,
    TargetBounds,
)
from harness.redis import RedisServer
from tests.discovery.discovery_helpers import record
from tests.leases.lease_stores import (
    RECORDS,
    MakeStore,
    granted,
    pool,
    refused,
)

pytestmark = pytest.mark.integration

SITE = "shop.example"


def paced(make_store: MakeStore, *targets: TargetBounds, **pace: Any) -> LeaseStore:
    return make_store(pace=PaceLimits(targets=targets, **pace))


def redis_paced(
    redis_server: RedisServer, redis_prefix: str, clock: ManualClock, limits: PaceLimits
) -> RedisLeaseStore:
    """A Redis store on `redis_prefix` with these pace limits, on the test's clock."""
    return RedisLeaseStore(
        redis_server.url,
        prefix=redis_prefix,
        timeout=2.0,
        limits=LeaseLimits(pace=limits),
        clock=clock,
    )


async def ok(store: LeaseStore, lease: Lease, count: int) -> Pace:
    return await _report(store, lease.lease_id, ReportResult.OK, count=count)


async def rate_limited(
    store: LeaseStore,
    lease: Lease,
    retry_after: float | None = None,
    accepted: int | None = None,
) -> Pace:
    return await _report(
        store, lease.lease_id, ReportResult.RATE_LIMITED, retry_after, accepted=accepted
    )


async def _report(
    store: LeaseStore,
    lease_id: LeaseId,
    result: ReportResult,
    retry_after: float | None = None,
    count: int = 1,
    accepted: int | None = None,
) -> Pace:
    outcome = await store.report(lease_id, result, None, retry_after, RECORDS.get, count, accepted)
    assert outcome is not None and outcome.pace is not None
    return outcome.pace


def rate(pace: Pace | None) -> float:
    assert pace is not None
    return round(pace.rate, 6)


async def test_a_new_pair_starts_at_the_start_pace(make_store: MakeStore) -> None:
    store = paced(make_store, start=2.5)
    lease = granted(await store.acquire(pool(record("a")), SITE, 60))
    assert lease.pace == Pace(rate=2.5, burst=1, lowered_at=None)


async def test_slow_start_quadruples_the_pace_per_second_of_traffic(
    make_store: MakeStore,
) -> None:
    store = paced(make_store, start=0.5, increase=0.5)
    lease = granted(await store.acquire(pool(record("a")), SITE, 60))
    assert rate(await ok(store, lease, 1)) == 8.0, "two seconds' worth at 0.5/s: x 4 x 4"
    assert rate(await ok(store, lease, 4)) == 16.0, "half a second's worth at 8/s: x 2"
    assert rate(await ok(store, lease, 4)) == 22.627417, "a quarter second's worth: x sqrt(2)"
    renewed = await store.renew(lease.lease_id, 60, RECORDS.get)
    assert renewed is not None and renewed.pace is not None
    assert (rate(renewed.pace), renewed.pace.burst) == (22.627417, 1)


async def test_after_a_limit_the_pace_climbs_back_fast_and_cruises_below_it(
    make_store: MakeStore, clock: ManualClock
) -> None:
    store = paced(make_store, start=4.0, decrease=0.5, settle=1.0, cruise=0.9, probe_after=30)
    lease = granted(await store.acquire(pool(record("a")), SITE, 60))
    assert rate(await rate_limited(store, lease)) == 2.0, "limited at 4/s"
    clock.advance(1.0)
    assert rate(await ok(store, lease, 1)) == 2.828427, "doubling per second again"
    assert rate(await ok(store, lease, 3)) == 3.6, "up to 0.9 of the limit, no further"
    clock.advance(28.0)
    assert rate(await ok(store, lease, 100)) == 3.6, "cruising until the probe"


async def test_the_probe_grows_above_the_limit_and_finds_it_again(
    make_store: MakeStore, clock: ManualClock
) -> None:
    store = paced(make_store, start=4.0, decrease=0.5, increase=0.25, cruise=1.0, probe_after=30)
    lease = granted(await store.acquire(pool(record("a")), SITE, 60))
    await rate_limited(store, lease)
    clock.advance(1.0)
    assert rate(await ok(store, lease, 10)) == 4.0, "back at the limit"
    clock.advance(29.0)
    assert rate(await ok(store, lease, 4)) == 5.0, "probing: one second's worth, +25 %"
    clock.advance(0.5)
    assert rate(await rate_limited(store, lease)) == 2.5, "half of 5"
    clock.advance(1.0)
    assert rate(await ok(store, lease, 100)) == 4.5, "the site saw 4.5/s over the last second"


async def test_a_limit_hit_right_after_a_raise_came_at_the_pace_before_it(
    make_store: MakeStore,
) -> None:
    store = paced(make_store, start=1.0, decrease=0.5, cruise=1.0)
    lease = granted(await store.acquire(pool(record("a")), SITE, 60))
    assert rate(await ok(store, lease, 1)) == 4.0
    assert rate(await rate_limited(store, lease)) == 1.0, "the site saw 1/s: cruise there"


async def test_a_limit_hit_while_cruising_is_set_below_where_it_hit(
    make_store: MakeStore, clock: ManualClock
) -> None:
    store = paced(make_store, start=4.0, decrease=0.5, cruise=0.9, probe_after=30)
    lease = granted(await store.acquire(pool(record("a")), SITE, 60))
    await rate_limited(store, lease)
    clock.advance(1.0)
    assert rate(await ok(store, lease, 100)) == 3.6
    clock.advance(1.0)
    assert rate(await rate_limited(store, lease)) == 1.8, "the site lowered its limit"
    clock.advance(1.0)
    assert rate(await ok(store, lease, 100)) == 2.916, "0.9 of 0.9 of 3.6"


async def test_a_limit_the_holder_counted_is_the_limit(
    make_store: MakeStore, clock: ManualClock
) -> None:
    store = paced(make_store, start=1.0, decrease=0.7, cruise=0.95, probe_after=30)
    lease = granted(await store.acquire(pool(record("a")), SITE, 60))
    assert rate(await ok(store, lease, 2)) == 16.0
    clock.advance(0.5)
    lowered = await rate_limited(store, lease, accepted=5)
    assert rate(lowered) == 4.75, "0.95 of the 5/s the site accepted, not of an estimate"
    clock.advance(1.0)
    assert rate(await ok(store, lease, 100)) == 4.75, "cruising there"
    clock.advance(1.0)
    assert rate(await rate_limited(store, lease, accepted=3)) == 2.85, "a lowered limit, as counted"
    clock.advance(1.0)
    assert rate(await ok(store, lease, 100)) == 2.85


async def test_a_counted_limit_lowers_the_pace_to_the_cruise_or_by_converge(
    make_store: MakeStore, clock: ManualClock
) -> None:
    store = paced(make_store, start=1.0, decrease=0.7, cruise=0.95, probe_after=30)
    lease = granted(await store.acquire(pool(record("a")), SITE, 60))
    assert rate(await ok(store, lease, 2)) == 16.0
    clock.advance(0.5)
    assert rate(await rate_limited(store, lease, accepted=5)) == 4.75
    clock.advance(31.0)
    probing = rate(await ok(store, lease, 10))
    assert probing > 5.0, "probing above the limit"
    clock.advance(1.0)
    lowered = rate(await rate_limited(store, lease, accepted=5))
    assert lowered == round(min(4.75, 0.9 * probing), 6), "not 0.7 of the probe"
    clock.advance(1.0)
    assert rate(await ok(store, lease, 100)) == 4.75, "back at the cruise"
    clock.advance(1.0)
    assert rate(await rate_limited(store, lease, accepted=5)) == 4.275, "bunched: 0.9 of it"
    clock.advance(1.0)
    assert rate(await ok(store, lease, 100)) == 4.75
    clock.advance(1.0)
    assert rate(await rate_limited(store, lease, accepted=4)) == 4.275, "counted one late"
    clock.advance(1.0)
    assert rate(await ok(store, lease, 100)) == 4.75, "the limit stayed 5"


async def test_a_refusal_counting_none_at_a_limit_of_one_keeps_that_limit(
    make_store: MakeStore, clock: ManualClock
) -> None:
    store = paced(make_store, start=2.0, decrease=0.7, cruise=0.95, probe_after=30)
    lease = granted(await store.acquire(pool(record("a")), SITE, 60))
    assert rate(await rate_limited(store, lease, accepted=1)) == 0.95, "a 1/s site"
    clock.advance(1.0)
    assert rate(await ok(store, lease, 100)) == 0.95, "cruising there"
    clock.advance(1.0)
    lowered = await rate_limited(store, lease, accepted=0)
    assert rate(lowered) == 0.855, "none counted: one short of 1, by CONVERGE"
    clock.advance(1.0)
    assert rate(await ok(store, lease, 100)) == 0.95, "the limit stayed 1"


async def test_a_limit_counted_as_nothing_is_estimated(
    make_store: MakeStore, clock: ManualClock
) -> None:
    store = paced(make_store, start=4.0, decrease=0.5, cruise=0.9)
    lease = granted(await store.acquire(pool(record("a")), SITE, 60))
    assert rate(await rate_limited(store, lease, accepted=0)) == 2.0
    clock.advance(1.0)
    assert rate(await ok(store, lease, 100)) == 3.6, "0.9 of the 4/s the site saw"


async def test_a_pair_in_slow_start_takes_the_limit_another_proxy_found(
    make_store: MakeStore, clock: ManualClock
) -> None:
    store = paced(make_store, start=1.0, cruise=0.95, probe_after=30)
    candidates = pool(record("a"), record("b"), record("c"))
    first = granted(await store.acquire(candidates, SITE, 60))
    second = granted(await store.acquire(candidates, SITE, 60))
    third = granted(await store.acquire(candidates, SITE, 60))
    assert rate(await ok(store, first, 1)) == 4.0, "the first to report explores the site"
    clock.advance(1.0)
    assert rate(await ok(store, first, 2)) == 8.0, "the site accepted 2/s from it"
    assert rate(await ok(store, second, 1)) == 2.0, "the others go there, no higher"
    assert rate(await ok(store, third, 6)) == 2.0
    clock.advance(0.5)
    assert rate(await rate_limited(store, first, accepted=5)) == 4.75, "0.95 of 5: as counted"
    assert rate(await ok(store, second, 3)) == 4.75, "climbs no further than the fleet's cruise"
    assert rate(await ok(store, third, 1)) == 4.75, "at once: no climb, no rate limit of its own"
    clock.advance(10.0)
    assert rate(await ok(store, second, 100)) == 4.75, "and cruises until the probe"
    clock.advance(25.0)
    assert rate(await ok(store, second, 5)) > 4.75, "then probes"


async def test_a_stopped_explorer_frees_the_pairs_behind_it(
    make_store: MakeStore, clock: ManualClock
) -> None:
    store = paced(make_store, start=1.0, cruise=0.95)
    candidates = pool(record("a"), record("b"))
    first = granted(await store.acquire(candidates, SITE, 60))
    second = granted(await store.acquire(candidates, SITE, 60))
    assert rate(await ok(store, first, 1)) == 4.0
    clock.advance(1.0)
    assert rate(await ok(store, first, 2)) == 8.0
    assert rate(await ok(store, second, 3)) == 2.0, "trailing at the 2/s the site accepted"
    clock.advance(2.0)  # first raised nothing since: its crawler idles
    assert rate(await ok(store, second, 2)) == 8.0, "second explores in its turn"
    assert rate(await ok(store, second, 8)) == 32.0
    assert rate(await ok(store, first, 8)) == 8.0, "and first trails it, no higher"
    clock.advance(0.5)
    assert rate(await rate_limited(store, first, accepted=5)) == 4.75
    assert rate(await ok(store, second, 1)) == 4.75, "above the limit found: to the cruise at once"


async def test_reports_under_a_second_apart_add_up_to_what_the_site_accepted(
    make_store: MakeStore, clock: ManualClock
) -> None:
    store = paced(make_store, start=1.0, cruise=0.95)
    candidates = pool(record("a"), record("b"))
    explorer = granted(await store.acquire(candidates, SITE, 60))
    assert rate(await ok(store, explorer, 1)) == 4.0, "its first report starts the count"
    clock.advance(0.8)
    assert rate(await ok(store, explorer, 2)) == 8.0, "0.8 s: counted, not measured yet"
    clock.advance(0.8)
    await ok(store, explorer, 6)
    newcomer = granted(await store.acquire(candidates, SITE, 60))
    assert rate(newcomer.pace) == 5.0, "8 accepted in 1.6 s: it starts at 5/s"


async def test_one_pair_probes_for_the_target_and_the_others_take_what_it_found(
    make_store: MakeStore, clock: ManualClock
) -> None:
    store = paced(make_store, start=1.0, cruise=0.95, probe_after=30)
    candidates = pool(record("a"), record("b"), record("c"))
    a, b, c = [granted(await store.acquire(candidates, SITE, 60)) for _ in range(3)]
    assert rate(await ok(store, a, 2)) == 16.0
    assert rate(await rate_limited(store, a, accepted=10)) == 9.5, "a found 10/s"
    assert rate(await ok(store, b, 1)) == rate(await ok(store, c, 1)) == 9.5, "b and c took it"
    clock.advance(30.0)
    probe = rate(await ok(store, a, 10))
    assert probe > 9.5, "a probes"
    assert rate(await ok(store, b, 10)) == 9.5, "b holds while a probes"
    clock.advance(1.0)
    assert rate(await ok(store, a, 10)) > probe
    assert rate(await ok(store, b, 10)) == probe, "and follows it where the site said ok"
    clock.advance(0.5)
    assert rate(await rate_limited(store, a, accepted=10)) < 9.5, "a's probe: 10/s still"
    assert rate(await ok(store, b, 10)) == 9.5, "b takes a's next probe time, and the cruise"
    assert rate(await ok(store, c, 10)) == 9.5, "so does c"
    clock.advance(29.0)
    assert rate(await ok(store, b, 10)) == 9.5, "no probe of its own before a's next"
    clock.advance(1.0)
    assert rate(await ok(store, b, 10)) > 9.5, "b probes this time"
    assert rate(await ok(store, a, 10)) == 9.5, "a holds"
    clock.advance(0.5)
    await rate_limited(store, b, accepted=12)
    assert rate(await ok(store, c, 10)) == 11.4, "the site allows 12/s now: c at once"


async def test_a_stopped_prober_frees_the_others_to_probe(
    make_store: MakeStore, clock: ManualClock
) -> None:
    store = paced(make_store, start=1.0, cruise=0.95, probe_after=30)
    candidates = pool(record("a"), record("b"))
    a, b = [granted(await store.acquire(candidates, SITE, 60)) for _ in range(2)]
    await ok(store, a, 4)
    await rate_limited(store, a, accepted=10)
    await ok(store, b, 1)
    clock.advance(30.0)
    assert rate(await ok(store, a, 10)) > 9.5, "a probes, then its crawler stops"
    assert rate(await ok(store, b, 10)) == 9.5
    clock.advance(2.0)
    assert rate(await ok(store, b, 10)) > 9.5, "b probes in its turn"


async def test_a_rate_limit_lowers_it_once_per_hold(
    make_store: MakeStore, clock: ManualClock
) -> None:
    store = paced(make_store, start=4.0, decrease=0.5, settle=1.0)
    lease = granted(await store.acquire(pool(record("a")), SITE, 60))
    lowered = await rate_limited(store, lease)
    assert lowered == Pace(rate=2.0, burst=1, lowered_at=clock.time())
    assert rate(await rate_limited(store, lease)) == 2.0, "an echo of the same overload"
    assert rate(await ok(store, lease, 10)) == 2.0, "nothing raises it within the hold"
    clock.advance(1.0)
    assert rate(await rate_limited(store, lease)) == 1.0


async def test_the_sites_retry_after_holds_the_lowered_pace(
    make_store: MakeStore, clock: ManualClock
) -> None:
    store = paced(make_store, start=4.0, decrease=0.5, settle=1.0, increase=1.0)
    lease = granted(await store.acquire(pool(record("a")), SITE, 60))
    assert rate(await rate_limited(store, lease, retry_after=10)) == 2.0
    clock.advance(5)
    assert rate(await rate_limited(store, lease)) == 2.0
    assert rate(await ok(store, lease, 4)) == 2.0
    clock.advance(5)
    assert rate(await ok(store, lease, 4)) == 3.8, "then back up, below where it was limited"


async def test_the_pace_stays_between_floor_and_ceiling(
    make_store: MakeStore, clock: ManualClock
) -> None:
    store = paced(make_store, start=1.0, floor=0.5, ceiling=3.0, decrease=0.5, settle=1.0)
    lease = granted(await store.acquire(pool(record("a")), SITE, 60))
    for _ in range(4):
        await rate_limited(store, lease)
        clock.advance(1.0)
    assert rate(await rate_limited(store, lease)) == 0.5
    clock.advance(230.0)  # the probe: 100 requests at the 0.45/s limit (0.9 of 0.5)
    for _ in range(10):
        await ok(store, lease, 100)
    assert rate(await ok(store, lease, 100)) == 3.0


async def test_a_proxy_new_to_the_target_starts_where_the_fleet_got(
    make_store: MakeStore, clock: ManualClock
) -> None:
    store = paced(make_store, start=1.0, increase=0.5)
    candidates = pool(record("a"), record("b"))
    first = granted(await store.acquire(candidates, SITE, 60))
    await ok(store, first, 2)
    second = granted(await store.acquire(candidates, SITE, 60))
    assert second.proxy.key != first.proxy.key
    assert rate(second.pace) == 1.0, "where the pair exploring the site at 16 was accepted"
    clock.advance(2.0)
    third = granted(await store.acquire(pool(record("c")), SITE, 60))
    assert rate(third.pace) == 16.0, "the exploring stopped: where it got"
    other = granted(await store.acquire(pool(record("c")), "other.example", 60))
    assert rate(other.pace) == 1.0, "each target learns its own"


async def test_a_proxy_new_to_the_target_starts_at_the_cruise_below_the_limit_found(
    make_store: MakeStore,
) -> None:
    store = paced(make_store, start=4.0, decrease=0.5)
    candidates = pool(record("a"), record("b"))
    first = granted(await store.acquire(candidates, SITE, 60))
    assert rate(await rate_limited(store, first)) == 2.0, "a holds its lowered pace"
    second = granted(await store.acquire(candidates, SITE, 60))
    assert second.proxy.key != first.proxy.key
    assert rate(second.pace) == 3.8, "0.95 of the 4/s a's address had accepted: no slow start"
    assert second.pace is not None and second.pace.lowered_at is None, "b was never lowered"
    assert rate(await ok(store, second, 100)) == 3.8, "and cruises there"


async def test_a_per_proxy_bound_caps_what_is_learned(make_store: MakeStore) -> None:
    bounds = TargetBounds("*.example", max_rate_per_proxy=1.5)
    store = paced(make_store, bounds, start=1.0, increase=1.0)
    lease = granted(await store.acquire(pool(record("a")), SITE, 60))
    assert rate(await ok(store, lease, 10)) == 1.5
    free = granted(await store.acquire(pool(record("b")), "example.org", 60))
    assert rate(await ok(store, free, 10)) == 50.0, "the pattern does not match example.org"


async def test_the_fleet_bound_is_shared_by_the_targets_leases(make_store: MakeStore) -> None:
    store = paced(make_store, TargetBounds(SITE, max_rate=3.0), start=2.0)
    candidates = pool(*(record(f"p{index}") for index in range(4)))
    leases = [granted(await store.acquire(candidates, SITE, 60)) for _ in range(4)]
    assert [rate(lease.pace) for lease in leases] == [2.0, 1.5, 1.0, 0.75]
    renewed = await store.renew(leases[0].lease_id, 60, RECORDS.get)
    assert renewed is not None and rate(renewed.pace) == 0.75
    await store.release(leases[1].lease_id)
    assert rate(await ok(store, leases[0], 0)) == 1.0


async def test_holders_of_a_shared_proxy_split_its_pace(make_store: MakeStore) -> None:
    store = paced(make_store, start=2.0)
    candidates = pool(record("shared", max_leases=3))
    first = granted(await store.acquire(candidates, SITE, 60))
    second = granted(await store.acquire(candidates, SITE, 60))
    assert (rate(first.pace), rate(second.pace)) == (2.0, 1.0)
    elsewhere = granted(await store.acquire(candidates, "other.example", 60))
    assert rate(elsewhere.pace) == 2.0, "another target's holder shares nothing"
    assert rate(await ok(store, first, 0)) == 1.0


async def test_a_target_at_its_lease_bound_gets_no_more(
    make_store: MakeStore, clock: ManualClock
) -> None:
    store = paced(make_store, TargetBounds(SITE, max_leases=2))
    candidates = pool(*(record(f"p{index}") for index in range(4)))
    first = granted(await store.acquire(candidates, SITE, 30))
    granted(await store.acquire(candidates, SITE, 60))
    full = refused(await store.acquire(candidates, SITE, 60, held=2))
    assert full.target_full and not full.target_paused
    assert (full.considered, full.at_capacity, full.in_cooldown) == (4, 4, 0)
    assert full.retry_after == 30.0, "until the first of its leases ends"
    granted(await store.acquire(candidates, "other.example", 60))
    await store.release(first.lease_id)
    granted(await store.acquire(candidates, SITE, 60))
    clock.advance(60)
    assert [granted(await store.acquire(candidates, SITE, 60)) for _ in range(2)]


async def test_a_refused_crawler_is_told_to_the_targets_holders_for_a_while(
    make_store: MakeStore, clock: ManualClock
) -> None:
    store = paced(make_store)
    candidates = pool(record("a"), record("b"), record("c"))
    first = granted(await store.acquire(candidates, SITE, 60))
    for held in (1, 2):
        granted(await store.acquire(candidates, SITE, 60, held=held))
    assert first.pace is not None and first.pace.waiting_held is None, "nobody waits yet"
    waiting = refused(await store.acquire(candidates, SITE, 60, held=0))
    assert waiting.retry_after == 2.0, "others hold more than it: a lease comes back soon"
    assert (await ok(store, first, 1)).waiting_held == 0
    renewed = await store.renew(first.lease_id, 60, RECORDS.get)
    assert renewed is not None and renewed.pace is not None
    assert renewed.pace.waiting_held == 0
    elsewhere = granted(await store.acquire(pool(record("d")), "other.example", 60))
    assert elsewhere.pace is not None and elsewhere.pace.waiting_held is None
    clock.advance(3.0)
    assert (await ok(store, first, 1)).waiting_held is None, "it stopped asking"
    greedy = refused(await store.acquire(candidates, SITE, 60, held=3))
    assert greedy.retry_after == 57.0, "it holds them all: nobody gives one back to it"
    assert (await ok(store, first, 1)).waiting_held == 3


async def test_forgetting_a_proxy_forgets_its_pace(make_store: MakeStore) -> None:
    store = paced(make_store, start=1.0, increase=0.5)
    proxy = record("a")
    lease = granted(await store.acquire(pool(proxy), None, 60))
    await ok(store, lease, 4)
    await store.forget_proxy(proxy.key)
    again = granted(await store.acquire(pool(proxy), None, 60))
    assert rate(again.pace) == 1.0


async def test_an_old_clients_single_ok_raises_the_pace_a_little(make_store: MakeStore) -> None:
    store = paced(make_store, start=2.0, increase=0.5)
    lease = granted(await store.acquire(pool(record("a")), SITE, 60))
    outcome = await store.report(lease.lease_id, ReportResult.OK, None, None, RECORDS.get)
    assert outcome is not None and rate(outcome.pace) == 4.0, "half a second's worth: x 2"


async def test_bans_leave_the_pace_alone(make_store: MakeStore) -> None:
    store = paced(make_store, start=2.0)
    lease = granted(await store.acquire(pool(record("a")), SITE, 60))
    assert rate(await _report(store, lease.lease_id, ReportResult.BANNED)) == 2.0


@pytest.mark.parametrize(
    "pace",
    [
        {"floor": 0},
        {"floor": 2.0, "start": 1.0},
        {"start": 60.0, "ceiling": 50.0},
        {"decrease": 1.0},
        {"increase": 0},
        {"cruise": 0},
        {"cruise": 1.5},
        {"probe_after": -1.0},
    ],
)
def test_nonsensical_paces_are_refused(pace: dict[str, float]) -> None:
    with pytest.raises(ValueError, match="pace"):
        PaceLimits(**pace)  # type: ignore[arg-type]


def test_nonsensical_bounds_are_refused() -> None:
    with pytest.raises(ValueError, match="max_rate"):
        TargetBounds("x", max_rate=0)
    with pytest.raises(ValueError, match="empty"):
        TargetBounds("")


async def test_the_redis_store_keeps_the_pace_across_a_restart(
    redis_server: RedisServer, redis_prefix: str, clock: ManualClock
) -> None:
    limits = PaceLimits(start=1.0, increase=0.5, decrease=0.5)

    def open_store() -> RedisLeaseStore:
        return redis_paced(redis_server, redis_prefix, clock, limits)

    before = open_store()
    candidates = pool(record("a"), record("b"))
    lease = granted(await before.acquire(candidates, SITE, 60))
    await ok(before, lease, 1)
    clock.advance(1.0)
    lowered = await rate_limited(before, lease)
    await before.close()
    after = open_store()
    try:
        renewed = await after.renew(lease.lease_id, 60, RECORDS.get)
        assert renewed is not None and renewed.pace == lowered
        assert rate(lowered) == 2.0 and lowered.lowered_at == clock.time()
        newcomer = granted(await after.acquire(candidates, SITE, 60))
        assert rate(newcomer.pace) == 3.8, "0.95 of the target's limit (4/s), kept"
        clock.advance(1.0)
        assert rate(await ok(after, lease, 100)) == 3.8, "the limit (4/s) was kept too"
    finally:
        await after.close()


async def test_the_redis_store_keeps_a_count_of_accepted_requests_across_a_restart(
    redis_server: RedisServer, redis_prefix: str, clock: ManualClock
) -> None:
    def open_store() -> RedisLeaseStore:
        return redis_paced(redis_server, redis_prefix, clock, PaceLimits(start=1.0))

    before = open_store()
    candidates = pool(record("a"), record("b"))
    explorer = granted(await before.acquire(candidates, SITE, 60))
    await ok(before, explorer, 1)
    clock.advance(0.8)
    await ok(before, explorer, 2)
    await before.close()
    after = open_store()
    try:
        clock.advance(0.8)
        await ok(after, explorer, 6)
        newcomer = granted(await after.acquire(candidates, SITE, 60))
        assert rate(newcomer.pace) == 5.0, "8 accepted in 1.6 s, counted on both sides"
    finally:
        await after.close()


async def test_the_redis_store_keeps_a_probe_going_across_a_restart(
    redis_server: RedisServer, redis_prefix: str, clock: ManualClock
) -> None:
    def open_store() -> RedisLeaseStore:
        return redis_paced(
            redis_server, redis_prefix, clock, PaceLimits(start=1.0, cruise=0.95, probe_after=30)
        )

    before = open_store()
    candidates = pool(record("a"), record("b"))
    a, b = [granted(await before.acquire(candidates, SITE, 60)) for _ in range(2)]
    await ok(before, a, 2)
    await rate_limited(before, a, accepted=10)
    await ok(before, b, 1)
    clock.advance(30.0)
    probe = rate(await ok(before, a, 10))
    await before.close()
    after = open_store()
    try:
        assert rate(await ok(after, b, 10)) == 9.5, "a probes: b holds"
        clock.advance(1.0)
        assert rate(await ok(after, a, 10)) > probe
        assert rate(await ok(after, b, 10)) == probe, "b follows where a was accepted"
    finally:
        await after.close()


async def test_the_redis_store_counts_from_the_last_report_of_a_pace_written_before_counts(
    redis_server: RedisServer, redis_prefix: str, clock: ManualClock
) -> None:
    store = redis_paced(redis_server, redis_prefix, clock, PaceLimits(start=1.0))
    try:
        candidates = pool(record("a"), record("b"))
        explorer = granted(await store.acquire(candidates, SITE, 60))
        async with Redis.from_url(redis_server.url) as admin:
            base = f"{{{redis_prefix}}}:"
            then = clock.time()
            await admin.hset(
                f"{base}pace:{explorer.proxy.key}", f"t:{SITE}", f"4 - 0 {then} - 0 {then} 2"
            )
            await admin.set(f"{base}tpace:{SITE}", f"4 {then} - 0 {then} 0")
        clock.advance(0.5)
        assert rate(await ok(store, explorer, 2)) == 8.0, "slow start: x 4^0.5"
        clock.advance(0.5)
        await ok(store, explorer, 2)
        newcomer = granted(await store.acquire(candidates, SITE, 60))
        assert rate(newcomer.pace) == 4.0, "4 accepted in the second since its last report"
    finally:
        await store.close()


async def test_a_pace_nobody_reports_on_is_forgotten(
    make_store: MakeStore, clock: ManualClock
) -> None:
    store = paced(make_store, start=1.0, increase=0.5, memory=100.0)
    candidates = pool(record("a"))
    lease = granted(await store.acquire(candidates, SITE, 60))
    await ok(store, lease, 2)
    await store.release(lease.lease_id)
    clock.advance(99)
    assert rate(granted(await store.acquire(candidates, SITE, 60)).pace) == 16.0
    clock.advance(61)
    assert rate(granted(await store.acquire(candidates, SITE, 60)).pace) == 1.0


async def test_the_redis_store_reads_paces_written_before_limits_were_kept(
    redis_server: RedisServer, redis_prefix: str, clock: ManualClock
) -> None:
    store = redis_paced(redis_server, redis_prefix, clock, PaceLimits(start=1.0))
    try:
        lease = granted(await store.acquire(pool(record("a")), SITE, 60))
        async with Redis.from_url(redis_server.url) as admin:
            base = f"{{{redis_prefix}}}:"
            await admin.hset(f"{base}pace:{lease.proxy.key}", f"t:{SITE}", f"3 - 0 {clock.time()}")
            await admin.set(f"{base}tpace:{SITE}", f"2 {clock.time()}")
        assert rate(await ok(store, lease, 3)) == 12.0, "no limit: slow start"
        newcomer = granted(await store.acquire(pool(record("b")), SITE, 60))
        assert rate(newcomer.pace) == 1.0, (
            "the start: the pair now exploring the site at 12 was not measured"
        )
    finally:
        await store.close()


async def test_a_slow_sites_probe_waits_for_a_hundred_requests_at_its_limit(
    make_store: MakeStore, clock: ManualClock
) -> None:
    store = paced(make_store, start=1.0, cruise=0.95, probe_after=30)
    slow = granted(await store.acquire(pool(record("a")), SITE, 60))
    fast = granted(await store.acquire(pool(record("b")), "fast.example", 60))
    assert rate(await ok(store, slow, 1)) == 4.0
    assert rate(await rate_limited(store, slow, accepted=1)) == 0.95, "its limit: 1/s"
    assert rate(await ok(store, fast, 2)) == 16.0
    assert rate(await rate_limited(store, fast, accepted=10)) == 9.5, "its limit: 10/s"
    clock.advance(30.0)
    assert rate(await ok(store, slow, 30)) == 0.95, "30 s at 1/s is 30 requests: no probe"
    assert rate(await ok(store, fast, 10)) > 9.5, "300 requests at 10/s: probing at 30 s"
    clock.advance(70.0)
    assert rate(await ok(store, slow, 1)) > 0.95, "100 requests at 1/s: probing"
