"""The fleet's report and ban counts in Redis (console/tally.py), on a real redis-server.

Two tallies over one prefix stand for two discovery replicas: each counts the
reports its own API accepted, and both read the same sums. Keys carry TTLs
(relative, so Redis's clock need not agree with ours); a Redis that does not
answer keeps the counts buffered until it does.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable

import pytest
from redis.asyncio import Redis

from egress_proxies.catalog import ProxyKey
from egress_proxies.clock import ManualClock
from egress_proxies.console import RedisTally
from egress_proxies.console.tally import REPORT_WINDOW
from egress_proxies.leases import ReportResult
from harness.redis import RedisServer
from tests.integration.discovery_helpers import virtual_clock

A, B = ProxyKey("crawl/a"), ProxyKey("crawl/b")
SITE = "shop.example"

MakeTally = Callable[..., RedisTally]


@pytest.fixture
def clock() -> ManualClock:
    return virtual_clock()


@pytest.fixture
async def make_tally(
    redis_server: RedisServer, redis_prefix: str, clock: ManualClock
) -> AsyncIterator[MakeTally]:
    made: list[RedisTally] = []

    def make(url: str = redis_server.url) -> RedisTally:
        tally = RedisTally(url, prefix=redis_prefix, timeout=1.0, clock=clock)
        made.append(tally)
        return tally

    yield make
    for tally in made:
        await tally.close()


async def test_two_replicas_tallies_read_the_same_sums(make_tally: MakeTally) -> None:
    first, second = make_tally(), make_tally()
    first.reported(A, SITE, ReportResult.OK, 8)
    first.reported(A, SITE, ReportResult.RATE_LIMITED, 1)
    second.reported(B, SITE, ReportResult.BANNED, 1)
    second.reported(B, None, ReportResult.BANNED, 1)  # no site: a ban, no site's report
    assert first.site_reports(SITE, 0) == (0, 0, 0)  # nothing flushed and read yet

    for tally in (first, second):
        await tally.flush()
    for tally in (first, second):
        await tally.refresh()

    for tally in (first, second):
        assert tally.site_reports(SITE, 0) == (8, 1, 1)
        assert (tally.bans_last_day(A), tally.bans_last_day(B)) == (0, 2)
        assert tally.sites() == [SITE]


async def test_reports_leave_after_an_hour_and_bans_after_a_day(
    make_tally: MakeTally, clock: ManualClock
) -> None:
    tally = make_tally()
    tally.reported(A, SITE, ReportResult.BANNED, 1)
    await tally.flush()
    clock.advance(REPORT_WINDOW + 60)
    await tally.refresh()
    assert (tally.site_reports(SITE, clock.time()), tally.sites()) == ((0, 0, 0), [])
    assert tally.bans_last_day(A) == 1
    clock.advance(24 * 3600)
    await tally.refresh()
    assert tally.bans_last_day(A) == 0


async def test_every_key_expires_within_its_window(
    make_tally: MakeTally, redis_server: RedisServer, redis_prefix: str
) -> None:
    tally = make_tally()
    tally.reported(A, SITE, ReportResult.BANNED, 1)
    await tally.flush()
    async with Redis.from_url(redis_server.url, decode_responses=True) as redis:
        keys = [key async for key in redis.scan_iter(f"{{{redis_prefix}}}:console:*")]
        assert len(keys) == 2
        for key in keys:
            ttl = await redis.ttl(key)
            limit = REPORT_WINDOW + 120 if ":reports:" in key else 25 * 3600
            assert 0 < ttl <= limit, (key, ttl)


async def test_a_redis_that_does_not_answer_keeps_the_counts_for_later(
    make_tally: MakeTally, own_redis: RedisServer
) -> None:
    tally = make_tally(own_redis.url)
    tally.reported(A, SITE, ReportResult.RATE_LIMITED, 1)
    await tally.flush()
    await tally.refresh()
    assert tally.site_reports(SITE, 0) == (0, 1, 0)
    own_redis.close()

    tally.reported(A, SITE, ReportResult.RATE_LIMITED, 1)
    await tally.flush()  # refused: kept
    await tally.refresh()  # refused: the last sums stay
    assert tally.site_reports(SITE, 0) == (0, 1, 0)
    assert "pending: 1" in repr(tally)
