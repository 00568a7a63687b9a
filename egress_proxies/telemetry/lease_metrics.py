"""Lease metrics: requests by outcome (fed by the API); active leases and cooldowns (scraped).

Nothing registers at import time: a LeaseMetrics registers on the registry it is
given, so tests use fresh registries and the composition root owns the real one.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

from prometheus_client import CollectorRegistry, Counter
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from egress_proxies.leases import LeaseCounts

LEASE_REQUESTS = "egress_proxies_lease_requests"
LEASE_REPORTS = "egress_proxies_lease_reports"
TARGET_PAUSES = "egress_proxies_target_pauses"
TARGETS_PAUSED = "egress_proxies_targets_paused"
LEASES_ACTIVE = "egress_proxies_leases_active"
COOLDOWNS_ACTIVE = "egress_proxies_lease_cooldowns_active"


class LeaseState(Protocol):
    """What the scrape-time collector reads (every LeaseStore satisfies it)."""

    def last_counts(self) -> LeaseCounts:
        """Active leases, cooling pairs and paused targets (as of the last read, for Redis)."""
        ...


class LeaseMetrics:
    """Registers the lease metrics on `registry`; its `lease_request` feeds the outcome counter."""

    def __init__(self, registry: CollectorRegistry, state: LeaseState) -> None:
        self._requests = Counter(
            LEASE_REQUESTS,
            "Lease requests (POST /v1/leases) by outcome.",
            ["outcome"],
            registry=registry,
        )
        # Each outcome's child, looked up once (on first use, so a series appears only
        # once counted): a label lookup per request costs more than the increment.
        self._by_outcome: dict[str, Counter] = {}
        self._reports = Counter(
            LEASE_REPORTS,
            "Lease reports by result and reason (empty when none was given).",
            ["result", "reason"],
            registry=registry,
        )
        self._pauses = Counter(
            TARGET_PAUSES, "Targets paused by the ban-storm guard.", registry=registry
        )
        registry.register(_LeaseStateCollector(state))

    def lease_request(self, outcome: str) -> None:
        """Count one lease request: granted, no_match or rejected."""
        counter = self._by_outcome.get(outcome)
        if counter is None:
            counter = self._by_outcome[outcome] = self._requests.labels(outcome=outcome)
        counter.inc()

    def lease_report(self, result: str, reason: str | None) -> None:
        """Count one accepted report."""
        self._reports.labels(result=result, reason=reason or "").inc()

    def target_paused(self) -> None:
        """Count one ban-storm pause."""
        self._pauses.inc()


class _LeaseStateCollector(Collector):
    """Reads the store at every scrape, so the gauges can never drift from it."""

    def __init__(self, state: LeaseState) -> None:
        self._state = state

    def describe(self) -> Iterable[Metric]:
        return self._families(leases=None, cooldowns=None, paused=None)

    def collect(self) -> Iterable[Metric]:
        counts = self._state.last_counts()
        return self._families(
            leases=counts.leases, cooldowns=counts.cooldowns, paused=counts.paused_targets
        )

    @staticmethod
    def _families(leases: int | None, cooldowns: int | None, paused: int | None) -> list[Metric]:
        return [
            GaugeMetricFamily(LEASES_ACTIVE, "Leases currently held.", value=leases),
            GaugeMetricFamily(
                COOLDOWNS_ACTIVE, "{proxy, target} pairs currently cooling down.", value=cooldowns
            ),
            GaugeMetricFamily(
                TARGETS_PAUSED, "Targets paused by the ban-storm guard now.", value=paused
            ),
        ]
