"""Pool.turn: send to a target at its pace through any proxy, against the real discovery app.

The pool spreads each target over as many proxies as the fleet grants while its
leases are busy, every target over every proxy, gives idle leases back, drops a
banned one, and releases what it took when closed.
"""

from __future__ import annotations

import random

import pytest
from egress_proxies_client import AsyncPool, Pool, ProxyBannedError, ProxyRateLimitedError

from egress_proxies.leases import PaceLimits
from tests.client.served import Served, serve_async, serve_in_thread
from tests.discovery.discovery_helpers import record

pytestmark = pytest.mark.client

PROXIES = ("p0", "p1", "p2")
ONE_PER_SECOND = PaceLimits(start=1.0, ceiling=1.0)


def pool_for(served: Served, **options: float | int | None) -> AsyncPool:
    return AsyncPool(
        served.url,
        served.tokens.one,
        sleep=served.asleep,
        clock=served.clock.time,
        rng=random.Random(3),
        **options,  # type: ignore[arg-type]
    )


async def test_a_target_grows_over_every_proxy_while_its_turns_are_late() -> None:
    fleet = [record(name) for name in PROXIES]
    async with serve_async(*fleet, pace=ONE_PER_SECOND) as served, pool_for(served) as pool:
        used = []
        for _ in range(6):
            async with pool.turn("shop.example") as lease:
                used.append(lease.proxy_key)
        assert sorted(used[:3]) == [f"crawl/{name}" for name in PROXIES], "one new lease a turn"
        assert sorted(used[3:]) == sorted(used[:3]), "then each at its pace, none twice in a row"
        assert served.store.last_counts().leases == 3
        assert served.sleeps, "the fourth turn waited for the first lease's pace"
    assert served.store.last_counts().leases == 0, "released when the pool closed"


async def test_every_target_gets_every_proxy_and_a_bound_holds() -> None:
    fleet = [record(name) for name in PROXIES]
    async with (
        serve_async(*fleet, pace=ONE_PER_SECOND) as served,
        pool_for(served, leases_per_target=2) as pool,
    ):
        for _ in range(4):
            for target in ("a.example", "b.example"):
                async with pool.turn(target):
                    pass
        # a: p0, then p2 (none for a on either, p2 none in all); b: p1, then p0 (tied at
        # one lease each with p2, first by name). Then each target holds its bound.
        assert await served.store.active_counts() == {"crawl/p0": 2, "crawl/p1": 1, "crawl/p2": 1}


async def test_a_ban_drops_the_lease_and_an_idle_one_is_given_back() -> None:
    fleet = [record(name) for name in PROXIES]
    async with serve_async(*fleet, pace=ONE_PER_SECOND) as served, pool_for(served) as pool:
        with pytest.raises(ProxyBannedError):
            async with pool.turn("shop.example") as banned:
                banned.check(403, {})
        assert served.reports("banned", "http_403") == 1
        assert served.store.last_counts().leases == 0
        with pytest.raises(ProxyRateLimitedError):
            async with pool.turn("shop.example") as lease:
                assert lease.proxy_key != banned.proxy_key
                lease.check(429, {"Retry-After": "2"})
        assert served.reports("rate_limited", "http_429") == 1
        async with pool.turn("shop.example") as other:
            assert other.proxy_key != lease.proxy_key, "the rate-limited lease waits 2 s"
        assert served.store.last_counts().leases == 2, "a rate limit keeps the lease"
        served.clock.advance(31)
        async with pool.turn("shop.example") as later:
            assert later.lease_id != lease.lease_id, "the idle lease was given back"
        assert served.store.last_counts().leases == 1


def test_the_sync_pool_turns_too() -> None:
    fleet = [record(name) for name in PROXIES]
    with serve_in_thread(*fleet, pace=ONE_PER_SECOND) as served:
        with Pool(
            served.url, served.tokens.one, sleep=served.sleep, clock=served.clock.time
        ) as pool:
            used = set()
            for _ in range(3):
                with pool.turn("shop.example") as lease:
                    used.add(lease.proxy_key)
                    lease.observe(200, {})
            assert used == {f"crawl/{name}" for name in PROXIES}
        assert served.store.last_counts().leases == 0
