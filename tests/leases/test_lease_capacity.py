"""The capacity suite, run against both stores: memory and a real redis-server.

A proxy carries leases per {proxy, target} pair: `maxLeases` for each target at
once, for any number of targets unless `maxTargets` bounds them, so a broad crawl
leases every proxy for every site; the fewest leases for the target win, then the
fewest in all; a 409 says when a full proxy has room again.
"""

from __future__ import annotations

from collections import Counter

import pytest

from egress_proxies.clock import ManualClock
from egress_proxies.leases import LeaseStore, NoMatch, ReportResult
from egress_proxies.leases.pace import DEFAULT_PACE_START
from tests.discovery.discovery_helpers import record
from tests.leases.lease_stores import (
    RECORDS,
    MakeStore,
    granted,
    pool,
    refused,
)

pytestmark = pytest.mark.integration

SITES = ("a.example", "b.example", "c.example")


@pytest.fixture
def store(make_store: MakeStore) -> LeaseStore:
    return make_store()


async def test_by_default_every_proxy_carries_every_target_once(store: LeaseStore) -> None:
    candidates = pool(*(record(f"p{index}") for index in range(4)))
    held = [granted(await store.acquire(candidates, site, 60)) for _ in range(4) for site in SITES]
    per_site = {
        site: {lease.proxy.name for lease in held if lease.target == site} for site in SITES
    }
    assert per_site == {site: {"p0", "p1", "p2", "p3"} for site in SITES}
    assert await store.active_counts() == {f"crawl/p{index}": 3 for index in range(4)}
    assert refused(await store.acquire(candidates, "a.example", 60, held=4)) == NoMatch(
        considered=4, at_capacity=4, in_cooldown=0, unhealthy=0, retry_after=60.0
    )
    assert all(
        lease.pace is not None and lease.pace.rate == DEFAULT_PACE_START for lease in held
    ), "holders of different targets do not split a pace"


async def test_the_fewest_leases_for_the_target_win_then_the_fewest_in_all(
    store: LeaseStore,
) -> None:
    fast = record("fast", latency_millis=5, max_leases=2)
    slow = record("slow", latency_millis=50, max_leases=2)
    candidates = pool(fast, slow)
    order = [
        (site, granted(await store.acquire(candidates, site, 60)).proxy.name)
        for site in ("a.example", "b.example", "a.example", "a.example", "b.example")
    ]
    assert order == [
        ("a.example", "fast"),  # both idle: the faster
        ("b.example", "slow"),  # none for b on either: the one with fewer leases in all
        ("a.example", "slow"),  # fast holds one for a, slow none
        ("a.example", "fast"),  # one each for a: fast holds 1 in all, slow 2
        ("b.example", "fast"),  # one each for b: 2 in all each, then latency
    ]


async def test_max_leases_bounds_the_holders_of_one_target(
    store: LeaseStore, clock: ManualClock
) -> None:
    candidates = pool(record("shared", max_leases=2))
    first = granted(await store.acquire(candidates, "a.example", 60))
    clock.advance(10)
    granted(await store.acquire(candidates, "a.example", 60))
    no_match = refused(await store.acquire(candidates, "a.example", 60, held=2))
    assert (no_match.at_capacity, no_match.retry_after) == (1, 50.0)
    other = granted(await store.acquire(candidates, "b.example", 60))
    assert first.pace is not None and other.pace is not None
    await store.release(first.lease_id)
    assert granted(await store.acquire(candidates, "a.example", 60)).proxy.name == "shared"


async def test_max_targets_one_makes_a_proxy_exclusive(
    store: LeaseStore, clock: ManualClock
) -> None:
    solo = record("solo", max_targets=1)
    candidates = pool(solo)
    lease = granted(await store.acquire(candidates, "a.example", 60))
    clock.advance(20)
    for target in ("a.example", "b.example", None):
        no_match = refused(await store.acquire(candidates, target, 60))
        assert (no_match.at_capacity, no_match.retry_after) == (1, 40.0), target
    await store.release(lease.lease_id)
    granted(await store.acquire(candidates, "b.example", 60))


async def test_max_targets_counts_targets_not_leases(store: LeaseStore, clock: ManualClock) -> None:
    candidates = pool(record("two", max_targets=2, max_leases=2))
    a1 = granted(await store.acquire(candidates, "a.example", 60))
    clock.advance(10)
    a2 = granted(await store.acquire(candidates, "a.example", 60))
    clock.advance(10)
    b = granted(await store.acquire(candidates, "b.example", 60))
    granted(await store.acquire(candidates, "b.example", 60))
    no_match = refused(await store.acquire(candidates, "c.example", 60))
    # Room for c once a target's leases have all ended: a's two end at 60 and 70.
    assert no_match.retry_after == 50.0
    await store.release(a1.lease_id)
    refused(await store.acquire(candidates, "c.example", 60))
    await store.release(a2.lease_id)
    assert granted(await store.acquire(candidates, "c.example", 60)).proxy.name == "two"
    assert await store.active_counts() == {"crawl/two": 3}
    await store.release(b.lease_id)
    assert (await store.counts()).leases == 2


async def test_a_cooldown_blocks_only_its_pair(store: LeaseStore) -> None:
    candidates = pool(record("p0"), record("p1"))
    lease = granted(await store.acquire(candidates, "a.example", 60))
    assert await store.report(lease.lease_id, ReportResult.BANNED, None, None, RECORDS.get)
    others = [granted(await store.acquire(candidates, "b.example", 60)).proxy.name for _ in "ab"]
    assert sorted(others) == ["p0", "p1"]
    second = granted(await store.acquire(candidates, "a.example", 60))
    assert second.proxy.name != lease.proxy.name
    no_match = refused(await store.acquire(candidates, "a.example", 60))
    assert (no_match.at_capacity, no_match.in_cooldown) == (2, 0), "p0 is held, and cools"


async def test_a_broad_crawl_spreads_every_target_over_the_fleet(store: LeaseStore) -> None:
    candidates = pool(*(record(f"p{index}", latency_millis=index) for index in range(5)))
    sites = [f"site-{index}.example" for index in range(30)]
    held = [granted(await store.acquire(candidates, site, 60)) for site in sites for _ in "ab"]
    per_proxy = Counter(lease.proxy.name for lease in held)
    assert sorted(per_proxy.values()) == [12] * 5, "each proxy carries as many leases"
    for site in sites:
        names = [lease.proxy.name for lease in held if lease.target == site]
        assert len(set(names)) == 2, f"{site} got one proxy twice: {names}"


async def test_expiry_and_forgetting_free_a_proxys_targets(
    store: LeaseStore, clock: ManualClock
) -> None:
    two = record("two", max_targets=2)
    candidates = pool(two)
    granted(await store.acquire(candidates, "a.example", 30))
    granted(await store.acquire(candidates, "b.example", 60))
    refused(await store.acquire(candidates, "c.example", 60))
    clock.advance(30)  # a's lease expires: room for a second target again
    granted(await store.acquire(candidates, "c.example", 60))
    refused(await store.acquire(candidates, "a.example", 60))
    await store.forget_proxy(two.key)
    assert await store.active_counts() == {}
    for target in ("a.example", "b.example"):
        assert granted(await store.acquire(candidates, target, 60)).proxy.name == "two"
    refused(await store.acquire(candidates, "c.example", 60))


async def test_pair_counts_name_each_target_and_end_with_the_leases(
    store: LeaseStore, clock: ManualClock
) -> None:
    candidates = pool(record("p0", max_leases=2), record("p1"))
    first = granted(await store.acquire(candidates, "a.example", 30))
    granted(await store.acquire(candidates, "a.example", 60))
    granted(await store.acquire(candidates, "a.example", 60))
    granted(await store.acquire(candidates, None, 60))
    assert await store.pair_counts() == {
        "crawl/p0": {"a.example": 2},
        "crawl/p1": {"a.example": 1, None: 1},
    }
    assert first.proxy.name == "p0"
    clock.advance(30)  # the first lease expires
    assert await store.pair_counts() == {
        "crawl/p0": {"a.example": 1},
        "crawl/p1": {"a.example": 1, None: 1},
    }
