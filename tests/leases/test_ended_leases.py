"""Ended leases: remembered exactly one window, in little memory each."""

from __future__ import annotations

import asyncio
import gc
import tracemalloc

import pytest

from egress_proxies.catalog import ProxyRecord
from egress_proxies.leases import CandidatePool, Lease, LeaseId, MemoryLeaseStore
from egress_proxies.leases.ended import _COMPACT_AFTER, EndedLeases
from tests.discovery.discovery_helpers import record

pytestmark = pytest.mark.unit

WINDOW = 60.0


def proxy(name: str) -> ProxyRecord:
    return record(name, credentials=None)


def lease(number: int, on: ProxyRecord) -> Lease:
    return Lease(LeaseId(f"lease-{number:017d}"), on, None, 30, 30.0)


def test_each_lease_is_remembered_for_exactly_one_window_after_it_ended() -> None:
    ended = EndedLeases(WINDOW)
    a, b = proxy("a"), proxy("b")
    # Enough leases, a second apart, that the array is compacted along the way.
    count = 3 * _COMPACT_AFTER
    for number in range(count):
        ended.forget_due(float(number))
        ended.add(lease(number, a if number % 2 else b), float(number))
    now = float(count - 1)
    first_kept = count - int(WINDOW)
    assert len(ended) == int(WINDOW)
    assert ended.get(lease(first_kept - 1, a).lease_id) is None
    assert ended.get(lease(first_kept, a).lease_id) == lease(first_kept, a if first_kept % 2 else b)
    ended.forget_due(now + 1)  # first_kept ended exactly a window ago
    assert ended.get(lease(first_kept, a).lease_id) is None
    assert ended.get(lease(first_kept + 1, a).lease_id) is not None
    ended.forget_proxy(a.key)
    assert len(ended) == int(WINDOW) // 2 - 1
    assert all(ended.get(lease(n, a).lease_id) is None for n in range(first_kept, count) if n % 2)
    ended.forget_due(now + WINDOW)
    assert len(ended) == 0
    ended.add(lease(count, a), now + WINDOW)  # and it starts over from an empty array
    assert ended.get(lease(count, a).lease_id) is not None


async def _lease_and_release(store: MemoryLeaseStore, pool: CandidatePool, times: int) -> None:
    for _ in range(times):
        # The target as a request body's parsing leaves it: a string of its own.
        target = b"example.com".decode()
        granted = await store.acquire(pool, target, 300)
        assert isinstance(granted, Lease)
        await store.release(granted.lease_id)


def test_a_released_lease_keeps_under_300_bytes_for_its_late_reports() -> None:
    # The lease, its id and its slots: about 250 bytes; a heap entry per lease, a
    # pool size and a target string of its own each made it 412.
    store = MemoryLeaseStore()
    pool = CandidatePool.of(tuple(proxy(f"p{n:04d}") for n in range(1_000)))
    asyncio.run(_lease_and_release(store, pool, 2_000))
    pairs = 10_000
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        asyncio.run(_lease_and_release(store, pool, pairs))
        gc.collect()
        kept = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert store.last_counts().leases == 0
    assert kept / pairs < 300, f"{kept / pairs:.0f} bytes kept per released lease"
