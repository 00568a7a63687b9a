"""Leases keep to their pace: the token bucket, ok counts in batches, the pace picked up.

The bucket's own rules run in virtual time; one test holds it to its rate against
a real local origin, counting the requests that arrive in each second.
"""

from __future__ import annotations

import asyncio
import heapq
import random
import time
from collections.abc import Callable

import httpx
import pytest
from aiohttp import web
from egress_proxies_client import AsyncPool, Pool, ProxyBannedError
from egress_proxies_client.pacing import OkBatch, Pace, TokenBucket

from egress_proxies.leases import PaceLimits
from tests.client.served import Served, serve_async, serve_in_thread
from tests.discovery.discovery_helpers import record

pytestmark = pytest.mark.client

SITE = "shop.example"
OK_HEADERS: dict[str, str] = {}


def pace(rate: float, burst: int = 1) -> Pace:
    return Pace(requests_per_second=rate, burst=burst, last_lowered_at=None)


def turns(bucket: TokenBucket, now: float, waiters: int) -> list[float]:
    """When `waiters` callers, all asking at `now`, get a turn each, in virtual time: a
    caller refused a turn sleeps the seconds `take` says and asks again."""
    taken: list[float] = []
    wakeups = [(now, index) for index in range(waiters)]
    heapq.heapify(wakeups)
    while wakeups:
        at, index = heapq.heappop(wakeups)
        delay = bucket.take(at)
        if delay == 0:
            taken.append(round(at, 9))
        else:
            heapq.heappush(wakeups, (at + delay, index))
    return taken


def test_the_bucket_spaces_turns_at_its_rate_after_the_burst() -> None:
    bucket = TokenBucket(pace(4.0, burst=2), now=0.0)
    assert turns(bucket, 0.0, 4) == [0.0, 0.25, 0.5, 0.75], "it starts with one token"
    assert turns(bucket, 10.0, 3) == [10.0, 10.0, 10.24], (
        "idle time refills it, up to the burst and 10 ms' worth (0.04 token at 4/s)"
    )


def test_a_late_turn_is_made_up_for_by_up_to_10_ms() -> None:
    bucket = TokenBucket(pace(10.0), now=0.0)
    assert bucket.take(0.0) == 0.0
    assert bucket.take(0.108) == 0.0, "8 ms late"
    assert bucket.take(0.2) == 0.0, "on time: the 8 ms made up for"
    assert bucket.take(0.35) == 0.0, "50 ms late"
    assert bucket.take(0.44) == pytest.approx(0.0), "10 ms of it made up for"
    assert bucket.take(0.5) == pytest.approx(0.04), "no more"


def test_peeking_at_the_next_turn_takes_nothing_and_counts_the_waiters() -> None:
    bucket = TokenBucket(pace(2.0), now=0.0)
    assert [bucket.next_turn(0.0), bucket.next_turn(0.0)] == [0.0, 0.0]
    assert bucket.take(0.0) == 0.0
    assert bucket.next_turn(0.0) == bucket.take(0.0) == 0.5
    with bucket.waiting(), bucket.waiting():
        assert bucket.next_turn(0.0) == 1.5, "two callers wait ahead of the next"
        assert "waiting: 2" in repr(bucket)
    assert bucket.next_turn(0.0) == 0.5


def test_a_pause_holds_every_turn_then_one_goes_then_the_pace() -> None:
    bucket = TokenBucket(pace(2.0, burst=4), now=0.0)
    bucket.take(5.0)
    bucket.pause(3.0, now=5.0)
    assert turns(bucket, 5.0, 3) == [8.0, 8.5, 9.0]


def test_a_lowered_pace_applies_at_once_to_callers_already_waiting() -> None:
    bucket = TokenBucket(pace(4.0), now=0.0)
    assert bucket.take(0.0) == 0.0
    assert bucket.take(0.0) == 0.25, "a waiter is told when to ask again, not promised a turn"
    bucket.set_pace(pace(1.0), now=0.1)
    # 0.4 of a token earned at 4/s by 0.1, the rest at 1/s: not at 0.25 as first said.
    assert turns(bucket, 0.25, 3) == [0.7, 1.7, 2.7]


def test_a_pause_applies_at_once_to_callers_already_waiting() -> None:
    bucket = TokenBucket(pace(5.0), now=0.0)
    bucket.take(0.0)
    bucket.pause(1.0, now=0.1)  # a 429 came back while three callers were waiting
    assert turns(bucket, 0.2, 3) == [1.2, 1.4, 1.6], "half a token by 0.1, then the pace"


def test_no_pace_means_no_wait() -> None:
    unpaced = TokenBucket(None, now=0.0)
    assert {unpaced.take(0.0) for _ in range(100)} == {0.0}
    assert repr(unpaced).startswith("<TokenBucket [unpaced")
    unpaced.set_pace(pace(10.0), now=0.0)
    assert turns(unpaced, 0.0, 2) == [0.0, 0.1]


def test_a_batch_goes_when_full_or_due_and_a_failed_one_is_put_back() -> None:
    batch = OkBatch(interval=1.0, size=3)
    assert batch.take(0.0) == 0, "nothing to report"
    assert batch.add() is True and batch.take(0.0) == 1, "the first accepted request goes at once"
    assert [batch.add(), batch.add()] == [False, False]
    assert batch.take(0.5) == 0
    assert batch.take(1.0) == 2
    assert batch.add(3) is True and batch.take(1.1) == 3
    batch.put_back(2)
    assert batch.take(1.2, force=True) == 2 and batch.take(9.0) == 0


def until(condition: Callable[[], bool], timeout: float = 10.0) -> None:
    """Poll `condition` until it holds (fails the test after `timeout` seconds)."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "the condition never held"
        time.sleep(0.01)


def sync_pool(served: Served, **options: object) -> Pool:
    return Pool(
        served.url,
        served.tokens.one,
        sleep=served.sleep,
        clock=served.clock.time,
        rng=random.Random(5),
        **options,  # type: ignore[arg-type]
    )


def test_ok_counts_are_reported_in_batches() -> None:
    with (
        serve_in_thread(record("a"), pace=PaceLimits(start=1.0)) as served,
        sync_pool(served, report_batch=10, report_interval=3600) as pool,
    ):
        lease = pool.acquire(target=SITE)
        assert lease.observe(200, OK_HEADERS) is None
        until(lambda: served.reports("ok", "") == 1)  # the first accepted request, at once
        for expected_reports in (2, 3):
            for _ in range(10):
                assert lease.observe(200, OK_HEADERS) is None
            until(lambda n=expected_reports: served.reports("ok", "") == n)  # type: ignore[misc]
        for _ in range(5):
            lease.observe(200, OK_HEADERS)
        assert served.reports("ok", "") == 3, "five are not a batch, an hour has not passed"
        lease.release()
        assert served.reports("ok", "") == 4, "release sends what is pending"
        assert lease.pace is not None and lease.pace.requests_per_second > 7.0


def test_a_due_batch_goes_after_the_interval() -> None:
    with (
        serve_in_thread(record("a"), pace=PaceLimits(start=1.0)) as served,
        sync_pool(served, report_batch=1000, report_interval=1.0) as pool,
    ):
        lease = pool.acquire(target=SITE)
        for _ in range(2):
            lease.observe(200, OK_HEADERS)
        served.clock.advance(1.0)
        until(lambda: served.reports("ok", "") == 1)
        until(lambda: lease.pace is not None and lease.pace.requests_per_second == 16.0)


def test_the_pace_is_picked_up_on_renew() -> None:
    with (
        serve_in_thread(record("a"), pace=PaceLimits(start=1.0)) as served,
        sync_pool(served) as pool,
    ):
        lease = pool.acquire(target=SITE)
        assert lease.pace == pace(1.0)
        pool.report(lease.lease_id, "ok", count=1)  # another crawler's report, by id
        assert lease.pace == pace(1.0)
        lease.renew(60)
        assert lease.pace is not None and lease.pace.requests_per_second == 4.0
        lease.wait_turn()
        lease.wait_turn()
        assert served.sleeps == [pytest.approx(0.25)], "the bucket keeps the new pace"


def test_a_rate_limit_is_reported_at_once_and_pauses_the_lease() -> None:
    with (
        serve_in_thread(record("a"), pace=PaceLimits(start=4.0)) as served,
        sync_pool(served) as pool,
    ):
        lease = pool.acquire(target=SITE)
        refused = lease.observe(429, {"Retry-After": "3"})
        assert refused is not None and refused.retry_after == 3.0
        assert served.reports("rate_limited", "http_429") == 1
        assert lease.pace is not None and lease.pace.requests_per_second == 2.8
        assert lease.pace.last_lowered_at is not None
        lease.wait_turn()
        assert served.sleeps == [3.0]
        with pytest.raises(ProxyBannedError):
            lease.observe(403, OK_HEADERS)


def test_a_rate_limit_reports_what_the_site_accepted_in_the_second_before() -> None:
    with (
        serve_in_thread(record("a"), pace=PaceLimits(start=8.0, cruise=0.95)) as served,
        sync_pool(served, report_interval=3600) as pool,
    ):
        lease = pool.acquire(target=SITE)
        for _ in range(3):
            lease.observe(200, OK_HEADERS)
        served.clock.advance(0.5)
        for _ in range(2):
            lease.observe(200, OK_HEADERS)
        served.clock.advance(0.6)
        assert lease.observe(429, {"Retry-After": "1"}) is not None
        assert lease.pace is not None
        assert lease.pace.requests_per_second == 1.9, "0.95 of the 2 accepted within the second"


async def test_the_async_lease_batches_and_picks_up_the_pace() -> None:
    async with (
        serve_async(record("a"), pace=PaceLimits(start=4.0)) as served,
        AsyncPool(
            served.url,
            served.tokens.one,
            sleep=served.asleep,
            clock=served.clock.time,
            report_batch=4,
            report_interval=3600,
        ) as pool,
    ):
        lease = await pool.acquire(target=SITE)
        for _ in range(4):
            assert await lease.observe(200, OK_HEADERS) is None
        for _ in range(500):  # the report is counted, then its answer reaches the lease
            if lease.pace is not None and lease.pace.requests_per_second == 16.0:
                break
            await asyncio.sleep(0.01)
        assert served.reports("ok", "") == 1
        assert lease.pace is not None and lease.pace.requests_per_second == 16.0
        await lease.wait_turn()
        await lease.wait_turn()
        assert served.sleeps == [pytest.approx(1 / 16)]
        await lease.release()
        assert served.reports("ok", "") == 1, "nothing was pending"


async def test_the_bucket_holds_its_rate_against_a_local_origin() -> None:
    rate, workers, wanted = 5.0, 8, 21
    arrivals: list[float] = []

    async def hello(_: web.Request) -> web.Response:
        arrivals.append(time.monotonic())
        return web.Response(text="hello")

    origin = web.Application()
    origin.router.add_get("/", hello)
    runner = web.AppRunner(origin)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    url = f"http://127.0.0.1:{runner.addresses[0][1]}/"
    try:
        async with (
            serve_async(record("a"), pace=PaceLimits(start=rate, ceiling=rate)) as served,
            AsyncPool(served.url, served.tokens.one) as pool,
            httpx.AsyncClient(trust_env=False) as http,
        ):
            lease = await pool.acquire(target=SITE)
            assert lease.pace is not None and lease.pace.requests_per_second == rate

            async def crawl() -> None:
                while len(arrivals) < wanted:
                    await lease.wait_turn()
                    response = await http.get(url)
                    await lease.observe(response.status_code, response.headers)

            await asyncio.gather(*(crawl() for _ in range(workers)))
            await lease.release()
    finally:
        await runner.cleanup()
    per_second = [sum(1 for t in arrivals if start <= t < start + 1.0) for start in arrivals]
    # A full bucket starts with one turn, then refills at `rate` (and 10 ms' worth more for
    # late turns): at most rate + 1 in a second (one more for arrivals delivered late).
    assert max(per_second) <= rate + 2, per_second
    assert per_second[0] >= rate - 1, "eight workers keep it busy: it sends at its pace"
