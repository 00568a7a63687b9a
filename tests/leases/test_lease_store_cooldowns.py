"""Listing and clearing cooldowns, against both stores: memory and a real redis-server.

What the console's Proxy x site view lists and its "Clear" button does: the
store is the truth, so a cleared pair is granted at once, and (with Redis) a
restarted operator, a new store over the same keys, finds it still cleared.
"""

from __future__ import annotations

import pytest

from egress_proxies.catalog import ProxyKey
from egress_proxies.clock import ManualClock
from egress_proxies.leases import Cooling, LeaseStore, ReportResult
from tests.discovery.discovery_helpers import record
from tests.leases.lease_stores import (
    RECORDS,
    MakeStore,
    granted,
    pool,
    refused,
)

pytestmark = pytest.mark.integration

WINDOW = 60.0
LIMITS = {"cooldown_window": WINDOW, "max_ttl": 3600, "ban_backoff_cap": 600.0}


@pytest.fixture
def store(make_store: MakeStore) -> LeaseStore:
    return make_store(**LIMITS)


async def cool(store: LeaseStore, name: str, target: str | None, result: ReportResult) -> ProxyKey:
    """Lease `name` for `target`, report `result` for it and end the lease."""
    lease = granted(await store.acquire(pool(record(name, max_leases=10)), target, 60))
    assert await store.report(lease.lease_id, result, target, None, RECORDS.get)
    await store.release(lease.lease_id)
    return lease.proxy.key


async def test_cooling_pairs_are_listed_soonest_first_with_their_cause(
    store: LeaseStore, clock: ManualClock
) -> None:
    limited = await cool(store, "b", "news.example", ReportResult.RATE_LIMITED)
    clock.advance(1)
    banned = await cool(store, "a", "shop.example", ReportResult.BANNED)
    clock.advance(1)
    everywhere = await cool(store, "c", None, ReportResult.BANNED)
    now = clock.time()

    listed = await store.cooldowns()

    assert [(c.proxy, c.target, c.from_ban) for c in listed] == [
        (limited, "news.example", False),
        (banned, "shop.example", True),
        (everywhere, None, True),
    ]
    assert [c.until for c in listed] == [now - 2 + 30, now - 1 + WINDOW, now + WINDOW]
    clock.advance(WINDOW)
    assert await store.cooldowns() == []


async def test_a_cleared_cooldown_is_granted_at_once_and_its_strikes_forgotten(
    store: LeaseStore, clock: ManualClock
) -> None:
    key = await cool(store, "a", "shop.example", ReportResult.BANNED)
    other = await cool(store, "a", "news.example", ReportResult.BANNED)
    candidates = pool(record("a", max_leases=10))
    refused(await store.acquire(candidates, "shop.example", 60))

    assert await store.clear_cooldown(key, "shop.example") is True

    granted(await store.acquire(candidates, "shop.example", 60))
    [left] = await store.cooldowns()
    assert (left.proxy, left.target) == (other, "news.example")
    assert (await store.counts()).cooldowns == 1
    # Strikes forgotten too: the next ban cools for one window, not two.
    clock.advance(1)
    await cool(store, "a", "shop.example", ReportResult.BANNED)
    [again] = [c for c in await store.cooldowns() if c.target == "shop.example"]
    assert again.until == clock.time() + WINDOW


async def test_clearing_what_does_not_cool_changes_nothing(store: LeaseStore) -> None:
    key = await cool(store, "a", "shop.example", ReportResult.RATE_LIMITED)
    before = await store.cooldowns()

    assert await store.clear_cooldown(key, "other.example") is False
    assert await store.clear_cooldown(key, None) is False
    assert await store.clear_cooldown(ProxyKey("crawl/nobody"), "shop.example") is False

    assert await store.cooldowns() == before


async def test_the_global_cooldown_is_cleared_apart_from_the_per_target_ones(
    store: LeaseStore,
) -> None:
    await cool(store, "a", "shop.example", ReportResult.RATE_LIMITED)
    key = await cool(store, "a", None, ReportResult.BANNED)
    candidates = pool(record("a", max_leases=10))

    assert await store.clear_cooldown(key, None) is True

    assert [(c.target, c.from_ban) for c in await store.cooldowns()] == [("shop.example", False)]
    granted(await store.acquire(candidates, "news.example", 60))
    refused(await store.acquire(candidates, "shop.example", 60))


async def test_a_restarted_operator_finds_the_cleared_cooldown_still_cleared(
    make_store: MakeStore, request: pytest.FixtureRequest
) -> None:
    before = make_store(**LIMITS)
    cleared = await cool(before, "a", "shop.example", ReportResult.BANNED)
    kept = await cool(before, "b", "shop.example", ReportResult.BANNED)
    assert await before.clear_cooldown(cleared, "shop.example")
    await before.close()

    after = make_store(**LIMITS)  # a new process: with Redis, over the same keys

    listed = await after.cooldowns()
    assert cleared not in [c.proxy for c in listed]
    if request.node.callspec.params["make_store"] == "redis":
        assert [(c.proxy, c.target) for c in listed] == [(kept, "shop.example")]
    else:
        assert listed == []  # the memory store starts empty: nothing cools after a restart
    granted(await after.acquire(pool(record("a", max_leases=10)), "shop.example", 60))


def test_cooling_is_a_plain_value() -> None:
    assert Cooling(ProxyKey("crawl/a"), None, 1.0, True) == Cooling(
        ProxyKey("crawl/a"), None, 1.0, True
    )
