"""The lease stores under test: memory, or Redis on the session's real redis-server.

The `make_store` fixture, parametrised over STORE_KINDS, enters
`store_maker`: stores of that kind on the test's virtual `clock`, so one
suite proves both stores keep one semantics. A conftest or test module
imports both fixtures to use them.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import pytest

from egress_proxies.catalog import ProxyKey, ProxyRecord
from egress_proxies.clock import ManualClock
from egress_proxies.leases import (
    CandidatePool,
    Lease,
    LeaseLimits,
    LeaseStore,
    MemoryLeaseStore,
    NoMatch,
    RedisLeaseStore,
)
from harness.redis import RedisServer
from tests.discovery.discovery_helpers import virtual_clock

MakeStore = Callable[..., LeaseStore]
# Every record a test put in a pool, by key: the catalog the Redis store resolves leases in.
RECORDS: dict[ProxyKey, ProxyRecord] = {}


STORE_KINDS = ("memory", "redis")


@pytest.fixture
def clock() -> ManualClock:
    return virtual_clock()


@pytest.fixture(params=STORE_KINDS)
async def make_store(
    request: pytest.FixtureRequest, clock: ManualClock
) -> AsyncIterator[MakeStore]:
    async with store_maker(request, clock) as make:
        yield make


@asynccontextmanager
async def store_maker(
    request: pytest.FixtureRequest, clock: ManualClock
) -> AsyncIterator[MakeStore]:
    """Builds stores of the kind `request.param` names on `clock`; closes them after."""
    made: list[LeaseStore] = []

    def make(**limits: Any) -> LeaseStore:
        settings = LeaseLimits(**limits)
        store: LeaseStore
        if request.param == "memory":
            store = MemoryLeaseStore(settings, clock=clock)
        else:
            server: RedisServer = request.getfixturevalue("redis_server")
            prefix: str = request.getfixturevalue("redis_prefix")
            store = RedisLeaseStore(
                server.url, prefix=prefix, timeout=2.0, limits=settings, clock=clock
            )
        made.append(store)
        return store

    try:
        yield make
    finally:
        for store in made:
            await store.close()


def pool(*records: ProxyRecord) -> CandidatePool:
    """A candidate pool of `records` (remembered for the Redis store's lookups)."""
    RECORDS.update((r.key, r) for r in records)
    return CandidatePool.of(records)


def granted(outcome: Lease | NoMatch) -> Lease:
    """The lease, failing the test when none was granted."""
    assert isinstance(outcome, Lease), outcome
    return outcome


def refused(outcome: Lease | NoMatch) -> NoMatch:
    """The refusal, failing the test when a lease was granted."""
    assert isinstance(outcome, NoMatch), outcome
    return outcome
