"""More callers than Redis connections: they queue in arrival order, none starves.

The connection pool's own wait is not first-come first-served: with several
times more concurrent callers than connections, a few waited past the store's
timeout and got 503s while the rest went round and round.
"""

from __future__ import annotations

import asyncio
import time

import pytest

from egress_proxies.leases import RedisLeaseStore, StoreUnavailableError
from egress_proxies.leases.redis_store import MAX_CONNECTIONS
from harness.redis import RedisServer
from tests.discovery.discovery_helpers import record
from tests.leases.lease_stores import granted, pool

pytestmark = pytest.mark.integration

CALLERS = 8 * MAX_CONNECTIONS
SECONDS = 4.0


async def test_callers_beyond_the_connection_pool_all_get_served(
    redis_server: RedisServer, redis_prefix: str
) -> None:
    store = RedisLeaseStore(redis_server.url, prefix=redis_prefix, timeout=1.0)
    candidates = pool(*(record(f"q{index}", max_leases=CALLERS) for index in range(4)))
    pairs = 0
    unavailable: list[StoreUnavailableError] = []

    async def caller(deadline: float) -> None:
        nonlocal pairs
        while time.monotonic() < deadline:
            try:
                lease = granted(await store.acquire(candidates, None, 60))
                await store.release(lease.lease_id)
            except StoreUnavailableError as error:
                unavailable.append(error)
            pairs += 1

    try:
        deadline = time.monotonic() + SECONDS
        await asyncio.gather(*(caller(deadline) for _ in range(CALLERS)))
    finally:
        await store.close()
    assert pairs > CALLERS
    assert not unavailable, f"{len(unavailable)} of {pairs} pairs timed out: {unavailable[0]}"
