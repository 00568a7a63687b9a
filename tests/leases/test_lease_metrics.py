"""Lease metrics: an explicit registry, outcomes counted, store state read at scrape time."""

from __future__ import annotations

import pytest
from prometheus_client import REGISTRY, CollectorRegistry

from egress_proxies.leases import (
    CandidatePool,
    Lease,
    LeaseLimits,
    MemoryLeaseStore,
    ReportResult,
)
from egress_proxies.telemetry.lease_metrics import (
    COOLDOWNS_ACTIVE,
    LEASE_REQUESTS,
    LEASES_ACTIVE,
    LeaseMetrics,
)
from tests.discovery.discovery_helpers import record, virtual_clock

pytestmark = pytest.mark.unit


async def test_gauges_follow_the_store_at_every_scrape() -> None:
    clock = virtual_clock()
    store = MemoryLeaseStore(LeaseLimits(cooldown_window=60), clock=clock)
    registry = CollectorRegistry()
    LeaseMetrics(registry, store)
    assert registry.get_sample_value(LEASES_ACTIVE) == 0
    lease = await store.acquire(CandidatePool.of([record("a")]), None, 30)
    assert isinstance(lease, Lease)
    await store.report(lease.lease_id, ReportResult.BANNED, "t.example")
    assert registry.get_sample_value(LEASES_ACTIVE) == 1
    assert registry.get_sample_value(COOLDOWNS_ACTIVE) == 1
    clock.advance(60)
    assert registry.get_sample_value(LEASES_ACTIVE) == 0
    assert registry.get_sample_value(COOLDOWNS_ACTIVE) == 0


def test_lease_requests_are_counted_by_outcome() -> None:
    registry = CollectorRegistry()
    metrics = LeaseMetrics(registry, MemoryLeaseStore())
    for outcome in ("granted", "granted", "no_match"):
        metrics.lease_request(outcome)
    total = f"{LEASE_REQUESTS}_total"
    assert registry.get_sample_value(total, {"outcome": "granted"}) == 2
    assert registry.get_sample_value(total, {"outcome": "no_match"}) == 1


def test_nothing_lands_on_the_global_registry() -> None:
    LeaseMetrics(CollectorRegistry(), MemoryLeaseStore())
    assert REGISTRY.get_sample_value(LEASES_ACTIVE) is None
    assert REGISTRY.get_sample_value(f"{LEASE_REQUESTS}_total", {"outcome": "granted"}) is None
