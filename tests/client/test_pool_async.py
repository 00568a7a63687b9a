"""The AsyncPool against the real discovery app on the test's loop."""

from __future__ import annotations

import random

import pytest
from egress_proxies_client import (
    AsyncPool,
    LeaseEndedError,
    NoProxyAvailableError,
    ProxyBannedError,
)

from tests.client.served import Served, serve_async
from tests.discovery.discovery_helpers import record

pytestmark = pytest.mark.client


def pool_for(served: Served) -> AsyncPool:
    return AsyncPool(
        served.url,
        served.tokens.one,
        sleep=served.asleep,
        clock=served.clock.time,
        rng=random.Random(3),
    )


async def test_a_409_waits_as_long_as_retry_after_says_then_leases() -> None:
    async with serve_async(record("only")) as served, pool_for(served) as pool:
        await pool.acquire(ttl=12)
        lease = await pool.acquire(wait=30)
        assert lease.proxy_key == "crawl/only"
        assert served.lease_requests("no_match") == 1
        [slept] = served.sleeps
        assert 12 <= slept <= 12 * 1.1


async def test_giving_up_carries_the_counts() -> None:
    async with serve_async(record("only")) as served, pool_for(served) as pool:
        await pool.acquire(ttl=100)
        with pytest.raises(NoProxyAvailableError) as refused:
            await pool.acquire(wait=99)
        assert (refused.value.attempts, served.sleeps) == (1, [])


async def test_renew_and_release_on_exception() -> None:
    async with serve_async(record("a"), record("b")) as served, pool_for(served) as pool:
        with pytest.raises(ProxyBannedError):
            async with pool.lease(target="t.example", ttl=30) as lease:
                served.clock.advance(20)
                await lease.renew(60)
                served.clock.advance(50)
                assert served.store.last_counts().leases == 1, "renewed past its first TTL"
                first = lease.proxy_key
                lease.check(403, {})
        assert served.store.last_counts().leases == 0
        assert served.reports("banned", "http_403") == 1
        with pytest.raises(LeaseEndedError):
            await lease.renew(60)
        async with pool.lease(target="t.example") as other:
            assert other.proxy_key != first
        assert repr(pool) == f"<AsyncPool {served.url} [leases: 0 held]>"
