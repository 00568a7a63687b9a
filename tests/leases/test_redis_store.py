"""What only the Redis store has: round trips, script reloads, outages, URLs and secrets."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator

import pytest
from redis.asyncio import Redis

from egress_proxies.leases import (
    CandidatePool,
    Lease,
    LeaseLimits,
    MemoryLeaseStore,
    NoMatch,
    RedisLeaseStore,
    StoreUnavailableError,
    open_lease_store,
    redact_url,
)
from harness.redis import RedisServer
from tests.discovery.discovery_helpers import record

pytestmark = pytest.mark.integration


@pytest.fixture
async def store(redis_server: RedisServer, redis_prefix: str) -> AsyncIterator[RedisLeaseStore]:
    store = RedisLeaseStore(redis_server.url, prefix=redis_prefix, timeout=1.0)
    yield store
    await store.close()


async def test_one_round_trip_per_acquire_and_per_release(
    store: RedisLeaseStore, redis_server: RedisServer
) -> None:
    candidates = CandidatePool.of([record(f"p{i}", max_leases=2) for i in range(50)])
    warm = await store.acquire(candidates, "t.example", 60)  # connects, loads the scripts
    assert isinstance(warm, Lease)
    lease: list[Lease] = []

    async def acquire() -> None:
        outcome = await store.acquire(candidates, "t.example", 60)
        assert isinstance(outcome, Lease)
        lease.append(outcome)

    sent = await redis_server.commands_sent(acquire)
    assert sent == ["EVALSHA"], sent
    sent = await redis_server.commands_sent(lambda: store.release(lease[0].lease_id))
    assert sent == ["EVALSHA"], sent
    print(f"round trips: acquire 1 ({sent}), release 1")


async def test_scripts_reload_after_redis_forgets_them(own_redis: RedisServer) -> None:
    store = RedisLeaseStore(own_redis.url, prefix="reload", timeout=1.0)
    try:
        candidates = CandidatePool.of([record("only")])
        assert isinstance(await store.acquire(candidates, None, 60), Lease)
        async with Redis.from_url(own_redis.url) as admin:
            await admin.script_flush()
        assert isinstance(await store.acquire(CandidatePool.of([record("other")]), None, 60), Lease)
        assert isinstance(await store.acquire(candidates, None, 60), NoMatch), "state kept"
    finally:
        await store.close()


async def test_a_stopped_redis_is_a_quick_error_and_a_restarted_one_serves_again(
    own_redis: RedisServer,
) -> None:
    store = RedisLeaseStore(own_redis.url, prefix="outage", timeout=0.5)
    candidates = CandidatePool.of([record("only")])
    try:
        await store.ping()
        own_redis.stop()
        started = time.monotonic()
        with pytest.raises(StoreUnavailableError) as raised:
            await store.acquire(candidates, None, 60)
        assert time.monotonic() - started < 0.5 + 0.2
        assert raised.value.retry_after == 1
        assert own_redis.password is not None
        assert own_redis.password not in str(raised.value)
        own_redis.start()
        assert isinstance(await store.acquire(candidates, None, 60), Lease)
    finally:
        await store.close()


async def test_a_frozen_redis_times_out_within_the_timeout(own_redis: RedisServer) -> None:
    # Decided by the order of the loop's timers (they fire in deadline order however
    # busy the machine is), not by a stopwatch: the acquire is still waiting 0.4 s
    # after it starts, and has given up before redis answers again 0.7 s after.
    store = RedisLeaseStore(own_redis.url, prefix="frozen", timeout=0.5)
    loop = asyncio.get_running_loop()
    waiting_at_0_4: list[bool] = []
    try:
        await store.ping()
        own_redis.pause()
        timers: list[asyncio.TimerHandle] = []
        try:
            acquiring = asyncio.create_task(
                store.acquire(CandidatePool.of([record("only")]), None, 60)
            )
            timers.append(loop.call_later(0.4, lambda: waiting_at_0_4.append(not acquiring.done())))
            await asyncio.sleep(0)  # the acquire has started, and with it its timeout
            timers.append(loop.call_later(0.5 + 0.2, own_redis.resume))
            with pytest.raises(StoreUnavailableError, match="TimeoutError"):
                await acquiring
        finally:
            for timer in timers:
                timer.cancel()
            own_redis.resume()
        assert waiting_at_0_4 == [True]
        await store.ping()
    finally:
        await store.close()


async def test_a_wrong_password_is_unavailable_not_a_crash(redis_server: RedisServer) -> None:
    url = f"redis://:wrong-password@127.0.0.1:{redis_server.port}/0"
    store = RedisLeaseStore(url, prefix="auth", timeout=0.5)
    try:
        with pytest.raises(StoreUnavailableError) as raised:
            await store.ping()
        assert "wrong-password" not in str(raised.value)
    finally:
        await store.close()


def test_the_password_never_shows_in_reprs_or_logs(
    redis_server: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    password = redis_server.password
    assert password
    store = open_lease_store(redis_server.url, prefix="repr")
    assert isinstance(store, RedisLeaseStore)
    assert password not in repr(store)
    assert "redis://:***@127.0.0.1" in repr(store)
    with caplog.at_level(logging.DEBUG):
        logging.getLogger("test").info("store %r", store)
    assert password not in caplog.text
    assert redact_url("rediss://user:pw@h:6380/1?password=pw2") == (
        "rediss://user:***@h:6380/1?password=***"
    )
    assert redact_url("redis://h:6379/0") == "redis://h:6379/0"


@pytest.mark.parametrize("url", [None, "memory"])
def test_memory_is_the_default(url: str | None) -> None:
    assert isinstance(open_lease_store(url), MemoryLeaseStore)


@pytest.mark.parametrize(
    "url", ["http://u:secret@h", "postgres://u:secret@h/db", "memory-x", "redis-ish://u:secret@h"]
)
def test_other_urls_are_refused_without_their_secret(url: str) -> None:
    with pytest.raises(ValueError, match="expected 'memory' or a redis") as raised:
        open_lease_store(url)
    assert "secret" not in str(raised.value)


def test_urls_of_every_redis_scheme_open_a_redis_store(tmp_path: object) -> None:
    for url in ("redis://h:6379/0", "rediss://:pw@h:6380/0", "unix:///run/redis.sock?db=0"):
        store = open_lease_store(url, limits=LeaseLimits(max_ttl=60))
        assert isinstance(store, RedisLeaseStore)
        assert store.max_ttl == 60
