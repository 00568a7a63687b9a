"""The synchronous Pool against the real discovery app: waiting, renew, release, reports."""

from __future__ import annotations

import itertools
import random

import httpx
import pytest
from egress_proxies_client import (
    LeaseEndedError,
    NoProxyAvailableError,
    Pool,
    ProxyBannedError,
    ProxyRateLimitedError,
    TargetPausedError,
)
from egress_proxies_client.backoff import Backoff

from tests.client.served import Served, serve_in_thread
from tests.discovery.discovery_helpers import record

pytestmark = pytest.mark.client


def pool_for(served: Served, **options: object) -> Pool:
    return Pool(
        served.url,
        served.tokens.one,
        sleep=served.sleep,
        clock=served.clock.time,
        rng=random.Random(7),
        **options,  # type: ignore[arg-type]
    )


def test_a_409_waits_as_long_as_retry_after_says_then_leases() -> None:
    with serve_in_thread(record("only")) as served, pool_for(served) as pool:
        holder = pool.acquire(ttl=20)
        served.clock.advance(5.5)
        lease = pool.acquire(wait=60)
        assert lease.proxy_key == "crawl/only"
        assert holder.ended is False
        assert served.lease_requests("no_match") == 1, "one refusal, no polling"
        assert served.lease_requests("granted") == 2
        [slept] = served.sleeps
        assert 15 <= slept <= 15 * 1.1, "Retry-After 15 (14.5 rounded up), jitter at most 10 %"


def test_retry_after_beyond_the_wait_gives_up_at_once_with_the_counts() -> None:
    with serve_in_thread(record("only")) as served, pool_for(served) as pool:
        pool.acquire(ttl=100)
        with pytest.raises(NoProxyAvailableError) as refused:
            pool.acquire(wait=30)
        assert served.sleeps == []
        assert served.lease_requests("no_match") == 1
        error = refused.value
        assert (error.attempts, error.counts.at_capacity, error.counts.retry_after) == (1, 1, 100)


def test_without_retry_after_the_backoff_grows_and_stops_at_the_wait() -> None:
    with serve_in_thread(record("down", healthy=False)) as served, pool_for(served) as pool:
        with pytest.raises(NoProxyAvailableError) as refused:
            pool.acquire(wait=20)
        sleeps = served.sleeps
        assert sum(sleeps) == pytest.approx(20)
        assert all(s >= 0.25 for s in sleeps), "never a busy loop"
        assert all(b >= a / 2 for a, b in itertools.pairwise(sleeps[:-1]))
        assert 4 <= len(sleeps) <= 8, sleeps
        assert served.lease_requests("no_match") == len(sleeps) + 1 == refused.value.attempts
        assert refused.value.counts.unhealthy == 1


def test_renew_keeps_the_proxy_and_fails_typed_once_the_lease_ended() -> None:
    with serve_in_thread(record("only")) as served, pool_for(served) as pool:
        lease = pool.acquire(ttl=30)
        served.clock.advance(20)
        lease.renew(60)
        served.clock.advance(50)
        with pytest.raises(NoProxyAvailableError):
            pool.acquire(wait=0)
        lease.release()
        with pytest.raises(LeaseEndedError):
            lease.renew(60)
        assert served.store.last_counts().leases == 0


def test_an_exception_releases_and_a_ban_is_reported_first() -> None:
    with serve_in_thread(record("a"), record("b")) as served, pool_for(served) as pool:
        with pytest.raises(ValueError), pool.lease(target="shop.example"):
            raise ValueError("the crawler's own bug")
        assert served.store.last_counts().leases == 0
        assert served.reports("banned", "captcha") == 0
        with pytest.raises(ProxyBannedError), pool.lease(target="shop.example") as lease:
            banned = lease.proxy_key
            lease.check(200, {}, b'<div class="g-recaptcha"></div>')
        assert served.store.last_counts().leases == 0
        assert served.reports("banned", "captcha") == 1
        with pool.lease(target="shop.example") as again:
            assert again.proxy_key != banned, "the banned pair cools"
        with pytest.raises(httpx.ProxyError), pool.lease(target="shop.example"):
            raise httpx.ProxyError("CONNECT refused")
        assert served.reports("banned", "tunnel_failed") == 1
        assert served.store.last_counts().leases == 0


def test_a_paused_target_raises_target_paused() -> None:
    fleet = [record(f"p{i}") for i in range(3)]
    storms = {"storm_share": 0.5, "storm_window": 60, "storm_pause": 120}
    with serve_in_thread(*fleet, **storms) as served, pool_for(served) as pool:
        for _ in range(2):
            with pytest.raises(ProxyBannedError), pool.lease(target="shop.example") as lease:
                lease.check(403, {})
        with pytest.raises(TargetPausedError) as paused:
            pool.acquire(target="shop.example", wait=60)
        assert paused.value.counts.target_paused
        assert paused.value.attempts == 1, "a 120 s pause is beyond a 60 s wait"
        with pool.lease(target="news.example"):
            pass


def test_rate_limits_report_the_site_s_retry_after() -> None:
    with serve_in_thread(record("only")) as served, pool_for(served) as pool:
        with pytest.raises(ProxyRateLimitedError), pool.lease(target="t.example") as lease:
            lease.check(429, {"Retry-After": "4"})
        assert served.reports("rate_limited", "http_429") == 1
        lease = pool.acquire(target="t.example", wait=10)
        assert served.sleeps and 4 <= served.sleeps[0] <= 4.4
        lease.release()


def test_backoff_plan_is_pure() -> None:
    plan = Backoff(base=1, cap=8, jitter=0.1)
    rng = random.Random(1)
    assert plan.next_wait(5, 0, 4, rng) is None
    assert 5 <= (plan.next_wait(5, 0, 10, rng) or 0) <= 5.5
    for attempt, ceiling in enumerate((1, 2, 4, 8, 8)):
        wait = plan.next_wait(None, attempt, 100, rng)
        assert wait is not None and ceiling / 2 <= wait <= ceiling
    assert plan.next_wait(None, 3, 0, rng) is None
