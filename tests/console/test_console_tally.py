"""The console's book shared in Redis (console/tally.py), on a real redis-server.

Two replicas, each its own RedisLeaseStore observed into its own LeaseBook and
RedisTally over one prefix: each notes what its own API was asked, and both
read one merged book. Keys carry relative TTLs; ended leases and old targets
leave as they are read; a Redis that does not answer keeps the writes for
later; a new process (a restart) reads the same book.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

import pytest
from redis.asyncio import Redis

from egress_proxies.catalog import ProxyKey
from egress_proxies.clock import ManualClock
from egress_proxies.console import RedisTally
from egress_proxies.console.leasebook import REPORT_WINDOW, LeaseBook
from egress_proxies.console.observed_store import ObservedLeaseStore
from egress_proxies.discovery.requester import serving
from egress_proxies.leases import CandidatePool, Lease, RedisLeaseStore, ReportResult
from harness.redis import RedisServer
from tests.discovery.discovery_helpers import record, virtual_clock

pytestmark = pytest.mark.integration

SITE = "shop.example"
A, B = record("a", max_leases=3), record("b")
RECORDS = {A.key: A, B.key: B}.get


@dataclass
class Replica:
    """One process's view: its observed store, its own book and the shared tally."""

    store: ObservedLeaseStore
    tally: RedisTally

    async def lease(self, proxy: str, holder: str) -> Lease:
        async def as_holder() -> Lease:
            serving(holder)
            outcome = await self.store.acquire(
                CandidatePool.of([A if proxy == "a" else B]), SITE, 120
            )
            assert isinstance(outcome, Lease), outcome
            return outcome

        return await asyncio.create_task(as_holder())

    async def report(self, lease: Lease, result: ReportResult, count: int = 1) -> None:
        assert await self.store.report(lease.lease_id, result, None, None, RECORDS, count)

    async def sync(self) -> None:
        await self.tally.flush()
        await self.tally.refresh()


MakeReplica = Callable[..., Replica]


@pytest.fixture
def clock() -> ManualClock:
    return virtual_clock()


@pytest.fixture
async def make_replica(
    redis_server: RedisServer, redis_prefix: str, clock: ManualClock
) -> AsyncIterator[MakeReplica]:
    made: list[Replica] = []

    def make(url: str = redis_server.url) -> Replica:
        store = RedisLeaseStore(redis_server.url, prefix=redis_prefix, timeout=1.0, clock=clock)
        tally = RedisTally(url, prefix=redis_prefix, timeout=1.0, clock=clock)
        replica = Replica(ObservedLeaseStore(store, LeaseBook(clock), tally), tally)
        made.append(replica)
        return replica

    yield make
    for replica in made:
        await replica.store.close()
        await replica.tally.close()


async def test_two_replicas_read_one_book(make_replica: MakeReplica, clock: ManualClock) -> None:
    first, second = make_replica(), make_replica()
    held = await first.lease("a", "crawler-a")
    await first.report(held, ReportResult.OK, 8)
    await first.report(held, ReportResult.RATE_LIMITED)
    banned = await second.lease("b", "crawler-b")
    await second.report(banned, ReportResult.BANNED)
    await second.store.release(banned.lease_id)
    for replica in (first, second):
        await replica.tally.flush()
    for replica in (first, second):
        await replica.tally.refresh()

    now = clock.time()
    for replica in (first, second):
        tally = replica.tally
        [lease] = tally.leases()
        assert (lease.holder, lease.proxy, lease.target) == ("crawler-a", A.key, SITE)
        assert lease.lease_id == held.lease_id[:6]
        site = tally.targets()[SITE]
        assert site.report_counts(now) == (8, 1, 1)
        assert set(site.paces) == {A.key, B.key} and site.fleet_pace(now) > 0
        assert site.lowered_at == now and list(site.rate_limits) == [now]
        assert (tally.bans_last_day(A.key), tally.bans_last_day(B.key)) == (0, 1)


async def test_a_renewal_keeps_the_holder_and_moves_the_end(
    make_replica: MakeReplica, clock: ManualClock
) -> None:
    first, second = make_replica(), make_replica()
    held = await first.lease("a", "crawler-a")
    await first.tally.flush()
    clock.advance(100)
    assert await second.store.renew(held.lease_id, 120, RECORDS) is not None  # another replica
    await second.sync()
    [lease] = second.tally.leases()
    assert (lease.holder, lease.granted_at) == ("crawler-a", clock.time() - 100)
    assert lease.expires_at == clock.time() + 120


async def test_leases_reports_and_bans_leave_with_their_windows(
    make_replica: MakeReplica, clock: ManualClock, redis_server: RedisServer, redis_prefix: str
) -> None:
    replica = make_replica()
    held = await replica.lease("a", "crawler-a")
    await replica.report(held, ReportResult.BANNED)
    await replica.sync()
    assert replica.tally.leases() != []

    clock.advance(REPORT_WINDOW + 60)
    await replica.sync()  # the ended lease and the quiet site are deleted as read
    await replica.sync()
    assert (replica.tally.leases(), replica.tally.targets()) == ([], {})
    assert replica.tally.bans_last_day(A.key) == 1
    clock.advance(24 * 3600)
    await replica.sync()
    assert replica.tally.bans_last_day(A.key) == 0
    async with Redis.from_url(redis_server.url, decode_responses=True) as redis:
        base = f"{{{redis_prefix}}}:console:"
        assert await redis.hlen(base + "leases") == 0
        assert await redis.hlen(base + "targets") == 0


async def test_every_counted_key_expires_within_its_window(
    make_replica: MakeReplica, redis_server: RedisServer, redis_prefix: str
) -> None:
    replica = make_replica()
    held = await replica.lease("a", "crawler-a")
    await replica.report(held, ReportResult.RATE_LIMITED)
    await replica.report(held, ReportResult.BANNED)
    await replica.sync()
    async with Redis.from_url(redis_server.url, decode_responses=True) as redis:
        keys = [key async for key in redis.scan_iter(f"{{{redis_prefix}}}:console:*")]
        windowed = [key for key in keys if not key.endswith((":leases", ":lease-ends", ":targets"))]
        assert {key.split(":console:")[1].split(":")[0] for key in windowed} == {
            "reports",
            "bans",
            "paces",
            "marks",
        }
        for key in windowed:
            ttl = await redis.ttl(key)
            assert 0 < ttl <= 25 * 3600, (key, ttl)
            if ":bans:" not in key:
                assert ttl <= REPORT_WINDOW + 120, (key, ttl)


async def test_a_gone_proxy_leaves_the_shared_book(make_replica: MakeReplica) -> None:
    first, second = make_replica(), make_replica()
    await first.lease("a", "crawler-a")
    await first.sync()
    await second.store.forget_proxy(ProxyKey(A.key))
    await second.sync()
    await first.sync()
    assert first.tally.leases() == [] and A.key not in first.tally.targets()[SITE].paces


async def test_a_restarted_process_reads_the_same_book(make_replica: MakeReplica) -> None:
    before = make_replica()
    held = await before.lease("a", "crawler-a")
    await before.report(held, ReportResult.BANNED)
    await before.tally.flush()

    after = make_replica()  # a new process over the same Redis
    await after.tally.refresh()

    [lease] = after.tally.leases()
    assert lease.holder == "crawler-a" and after.tally.bans_last_day(A.key) == 1


async def test_a_redis_that_does_not_answer_keeps_the_writes_for_later(
    make_replica: MakeReplica, own_redis: RedisServer
) -> None:
    replica = make_replica(own_redis.url)  # the tally on a Redis of its own
    held = await replica.lease("a", "crawler-a")
    await replica.sync()
    assert len(replica.tally.leases()) == 1
    own_redis.close()

    await replica.report(held, ReportResult.RATE_LIMITED)
    await replica.sync()  # refused: the writes wait, the last book stays
    assert len(replica.tally.leases()) == 1
    assert "pending: 0" not in repr(replica.tally)


async def test_sites_and_holders_with_any_characters_round_trip(
    make_replica: MakeReplica, clock: ManualClock
) -> None:
    replica = make_replica()
    odd = "odd\tsite \n name"

    async def as_holder() -> Lease:
        serving("team\tx y")
        outcome = await replica.store.acquire(CandidatePool.of([A]), odd, 120)
        assert isinstance(outcome, Lease), outcome
        return outcome

    held = await asyncio.create_task(as_holder())
    await replica.report(held, ReportResult.RATE_LIMITED)
    await replica.sync()
    [lease] = replica.tally.leases()
    assert (lease.holder, lease.target) == ("team\tx y", odd)
    assert replica.tally.targets()[odd].report_counts(clock.time()) == (0, 1, 0)


async def test_every_replica_records_the_first_offered_history_sample(
    make_replica: MakeReplica, clock: ManualClock
) -> None:
    first, second = make_replica(), make_replica()
    at = clock.time() // 10 * 10
    ours = {("pace", SITE): 1.5, ("fleet", "leases"): 2.0}
    assert await first.tally.exchange(at, 10, 60, ours) == [(at, ours)]
    assert await second.tally.exchange(at, 10, 60, {("pace", SITE): 9.0}) == [(at, ours)]
    assert await second.tally.exchange(at, 10, 60, {("pace", SITE): 9.0}) == []  # seen

    clock.advance(20)
    later = {("pace", SITE): 0.5}
    assert await second.tally.exchange(at + 20, 10, 60, later) == [(at + 20, later)]
    restarted = make_replica()  # a new process reads the last span back
    assert await restarted.tally.exchange(at + 20, 10, 60, {}) == [(at, ours), (at + 20, later)]


async def test_without_redis_a_history_sample_is_this_replicas_own(
    make_replica: MakeReplica, own_redis: RedisServer, clock: ManualClock
) -> None:
    replica = make_replica(own_redis.url)
    own_redis.close()
    at = clock.time() // 10 * 10
    assert await replica.tally.exchange(at, 10, 60, {("pace", SITE): 1.0}) == [
        (at, {("pace", SITE): 1.0})
    ]
