"""The lease book: what the console learns from the real store's answers, in virtual time."""

from __future__ import annotations

import asyncio
from dataclasses import replace

import pytest

from egress_proxies.catalog import ProxyRecord, proxy_key
from egress_proxies.clock import ManualClock
from egress_proxies.console.leasebook import MAX_TARGETS, LeaseBook
from egress_proxies.console.observed_store import ObservedLeaseStore
from egress_proxies.console.views import leases_view
from egress_proxies.discovery.requester import serving
from egress_proxies.leases import (
    CandidatePool,
    Cooling,
    Lease,
    LeaseId,
    LeaseLimits,
    MemoryLeaseStore,
    NoMatch,
    ReportResult,
)
from egress_proxies.model import HealthCheck

pytestmark = pytest.mark.unit

LIMITS = LeaseLimits(cooldown_window=300, rate_limit_window=30)


def record(name: str) -> ProxyRecord:
    return ProxyRecord(
        key=proxy_key("crawl", name),
        uid=f"uid-{name}",
        namespace="crawl",
        name=name,
        scheme="http",
        host="127.0.0.1",
        port=3128,
        health_check=HealthCheck(),
        healthy=True,
        latency_millis=10,
    )


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(start=1000.0)


@pytest.fixture
def book(clock: ManualClock) -> LeaseBook:
    return LeaseBook(clock)


@pytest.fixture
def store(book: LeaseBook, clock: ManualClock) -> ObservedLeaseStore:
    return ObservedLeaseStore(MemoryLeaseStore(LIMITS, clock=clock), book)


POOL = CandidatePool.of([record("a")])
RECORDS = {record("a").key: record("a")}.get


async def granted(store: ObservedLeaseStore, target: str | None = "shop.example") -> Lease:
    lease = await store.acquire(POOL, target, 60)
    assert isinstance(lease, Lease)
    return lease


async def test_leases_are_listed_until_released_or_expired(
    store: ObservedLeaseStore, book: LeaseBook, clock: ManualClock
) -> None:
    first = await granted(store)
    await store.release(first.lease_id)
    assert book.leases() == []
    second = await granted(store)
    [live] = book.leases()
    assert (live.lease_id, live.proxy, live.target) == (second.lease_id, "crawl/a", "shop.example")
    clock.advance(61)
    assert book.leases() == []


async def test_cooldowns_are_the_stores_and_a_ban_is_counted(
    store: ObservedLeaseStore, book: LeaseBook, clock: ManualClock
) -> None:
    lease = await granted(store)
    await store.report(lease.lease_id, ReportResult.BANNED, None, None, RECORDS)
    await store.release(lease.lease_id)
    [cooling] = await store.cooldowns()
    assert cooling == Cooling(proxy_key("crawl", "a"), "shop.example", clock.time() + 300, True)
    refused = await store.acquire(POOL, "shop.example", 60)
    assert isinstance(refused, NoMatch) and refused.in_cooldown == 1
    assert book.bans_last_day(proxy_key("crawl", "a")) == 1
    clock.advance(301)
    assert await store.cooldowns() == []
    assert isinstance(await store.acquire(POOL, "shop.example", 60), Lease)


async def test_a_rate_limit_lowers_the_sites_pace_and_is_counted(
    store: ObservedLeaseStore, book: LeaseBook, clock: ManualClock
) -> None:
    lease = await granted(store)
    await store.report(lease.lease_id, ReportResult.OK, None, None, RECORDS, count=8)
    site = book.targets()["shop.example"]
    before = site.fleet_pace(clock.time())
    assert before > 0 and site.lowered_at is None
    await store.report(lease.lease_id, ReportResult.RATE_LIMITED, None, 5.0, RECORDS)
    assert site.fleet_pace(clock.time()) < before
    assert site.lowered_at == clock.time()
    assert site.report_counts(clock.time()) == (8, 1, 0)
    assert list(site.rate_limits) == [clock.time()]
    [cooling] = await store.cooldowns()
    assert (cooling.until, cooling.from_ban) == (clock.time() + 5.0, False)


async def test_a_gone_proxy_leaves_the_book(
    store: ObservedLeaseStore, book: LeaseBook, clock: ManualClock
) -> None:
    lease = await granted(store)
    await store.report(lease.lease_id, ReportResult.BANNED, None, None, RECORDS)
    await store.forget_proxy(proxy_key("crawl", "a"))
    assert (book.leases(), await store.cooldowns()) == ([], [])
    assert book.bans_last_day(proxy_key("crawl", "a")) == 0
    assert book.targets()["shop.example"].paces == {}


async def test_targets_are_bounded_by_dropping_the_longest_unseen(
    book: LeaseBook, clock: ManualClock
) -> None:
    lease = Lease(
        lease_id=LeaseId("A" * 22), proxy=record("a"), target="t0", ttl_seconds=60, expires_at=2e9
    )
    for index in range(MAX_TARGETS + 1):
        clock.advance(1)
        book.granted(replace(lease, target=f"t{index}"))
    assert len(book.targets()) == MAX_TARGETS
    assert "t0" not in book.targets() and f"t{MAX_TARGETS}" in book.targets()


async def test_a_lease_is_noted_with_the_requesting_tokens_name_kept_on_renewal(
    store: ObservedLeaseStore, book: LeaseBook, clock: ManualClock
) -> None:
    async def as_crawler(name: str | None) -> Lease:
        serving(name)  # what the discovery API's route wrapper does once the token is checked
        return await granted(store)

    lease = await asyncio.create_task(as_crawler("crawler-a"))
    clock.advance(10)
    serving("someone-else")
    assert await store.renew(lease.lease_id, 60, RECORDS) is not None
    [live] = book.leases()
    assert (live.holder, live.granted_at) == ("crawler-a", clock.time() - 10)
    [row] = leases_view(book, clock.time())["leases"]
    assert (row["holder"], row["ageSeconds"], row["ttlLeftSeconds"]) == ("crawler-a", 10.0, 60.0)
    assert lease.lease_id not in str(row)
