"""The operator's Prometheus registry: every series of docs/operations.md, assembled explicitly.

Nothing registers at import time. The composition root builds one
`OperatorMetrics` on its registry and hands each component the recorder it
uses (`probes` to the health engine, `leases` to the discovery API, `gc` to
the sweeper, ...). Values that can be read are collected at scrape time
(proxies by phase, active leases and cooldowns); the rest are fed.
"""

from __future__ import annotations

import contextlib
import time
from collections import Counter as Tally
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from aiohttp import web
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.exposition import choose_encoder
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector
from typing_extensions import override

from egress_proxies.gc.sweeper import GcMetrics
from egress_proxies.model import Phase, ProviderName
from egress_proxies.providers.inventory import (
    InstanceId,
    Inventory,
    InventoryError,
    InventoryListing,
)
from egress_proxies.stacks.errors import classify
from egress_proxies.stacks.runner import StackOperationError
from egress_proxies.telemetry.lease_metrics import LeaseMetrics, LeaseState
from egress_proxies.telemetry.probe_metrics import PrometheusProbeMetrics

PROXIES = "egress_proxies_proxies"
STACK_OPERATIONS = "egress_proxies_stack_operations"
STACK_OPERATION_DURATION = "egress_proxies_stack_operation_duration_seconds"
PROVIDER_REQUESTS = "egress_proxies_provider_requests"
GC_DELETIONS = "egress_proxies_gc_deletions"
GC_SWEEP_DURATION = "egress_proxies_gc_sweep_duration_seconds"
GC_LAST_SWEEP = "egress_proxies_gc_last_sweep_timestamp_seconds"

STACK_BUCKETS = (1.0, 2.5, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1200.0)
SWEEP_BUCKETS = (0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)

ProxySource = Callable[[], Iterable[Mapping[str, Any]]]
"""Returns the Proxy bodies the operator knows right now (the fleet cache)."""


class OperatorMetrics:
    """Registers every operator series on `registry`; one recorder attribute per consumer."""

    def __init__(
        self, registry: CollectorRegistry, *, proxies: ProxySource, leases: LeaseState
    ) -> None:
        registry.register(ProxyPhaseCollector(proxies))
        self.probes = PrometheusProbeMetrics(registry)
        self.leases = LeaseMetrics(registry, leases)
        self.stacks = StackMetrics(registry)
        self.providers = ProviderMetrics(registry)
        self.gc = GcRecorder(registry)

    def __repr__(self) -> str:
        return "<OperatorMetrics>"


class ProxyPhaseCollector(Collector):
    """`egress_proxies_proxies{phase}`, counted from the fleet cache at every scrape.

    Every phase is always exported (0 when empty), so a series never vanishes;
    a Proxy without a phase yet counts as Pending, as compute_phase would say.
    """

    def __init__(self, proxies: ProxySource) -> None:
        self._proxies = proxies

    def describe(self) -> Iterable[Metric]:
        """The metric family without counting (the registry asks once, at registration)."""
        return [self._family()]

    @override
    def collect(self) -> Iterable[Metric]:
        tally = Tally({phase.value: 0 for phase in Phase})
        for body in self._proxies():
            tally[(body.get("status") or {}).get("phase") or Phase.PENDING.value] += 1
        family = self._family()
        for phase, count in sorted(tally.items()):
            family.add_metric([phase], count)
        return [family]

    @staticmethod
    def _family() -> GaugeMetricFamily:
        return GaugeMetricFamily(
            PROXIES, "Proxies known to the operator, by phase.", labels=["phase"]
        )


class StackMetrics:
    """Pulumi stack operations by op (up, destroy) and result, and their duration."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self._operations = Counter(
            STACK_OPERATIONS,
            "Pulumi stack operations by op and result (ok, or the error class).",
            ["op", "result"],
            registry=registry,
        )
        self._duration = Histogram(
            STACK_OPERATION_DURATION,
            "Duration of Pulumi stack operations, failed ones included.",
            ["op"],
            buckets=STACK_BUCKETS,
            registry=registry,
        )

    def observe(self, op: str, result: str, seconds: float) -> None:
        """Record one finished operation."""
        self._operations.labels(op=op, result=result).inc()
        self._duration.labels(op=op).observe(seconds)

    @contextlib.contextmanager
    def measure(self, op: str) -> Iterator[None]:
        """Time the operation in the block and record its result.

        The result is `ok`, the error class of a StackOperationError
        (`transient`, `quota`, `permanent`), or `error` for anything else.
        A cancelled operation did not finish and is not recorded.
        """
        started = time.perf_counter()
        try:
            yield
        except StackOperationError as error:
            self.observe(op, classify(error.text).value.lower(), time.perf_counter() - started)
            raise
        except Exception:
            self.observe(op, "error", time.perf_counter() - started)
            raise
        self.observe(op, "ok", time.perf_counter() - started)


class ProviderMetrics:
    """Provider inventory calls by provider, op (list, delete) and result (ok, partial, error)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self._requests = Counter(
            PROVIDER_REQUESTS,
            "Provider inventory calls by provider, op and result.",
            ["provider", "op", "result"],
            registry=registry,
        )

    def request(self, provider: str, op: str, result: str) -> None:
        """Count one call."""
        self._requests.labels(provider=provider, op=op, result=result).inc()


class MeteredInventory:
    """An Inventory that counts every call it forwards; the GC uses it like the one it wraps."""

    def __init__(self, inventory: Inventory, metrics: ProviderMetrics) -> None:
        self._inventory = inventory
        self._metrics = metrics

    def __repr__(self) -> str:
        return f"<MeteredInventory {self._inventory!r}>"

    @property
    def provider(self) -> ProviderName:
        """The wrapped inventory's provider."""
        return self._inventory.provider

    async def list_tagged(self) -> InventoryListing:
        """List, counting `ok`, `partial` (some scopes unreadable) or `error`."""
        try:
            listing = await self._inventory.list_tagged()
        except InventoryError:
            self._metrics.request(self.provider, "list", "error")
            raise
        self._metrics.request(self.provider, "list", "ok" if listing.complete else "partial")
        return listing

    async def delete(self, instance_id: InstanceId) -> None:
        """Delete, counting `ok` or `error`."""
        try:
            await self._inventory.delete(instance_id)
        except InventoryError:
            self._metrics.request(self.provider, "delete", "error")
            raise
        self._metrics.request(self.provider, "delete", "ok")


class GcRecorder(GcMetrics):
    """GC deletions, sweep duration and the last sweep's time, as the sweeper reports them."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self._deletions = Counter(
            GC_DELETIONS,
            "Orphaned instances the GC deleted, by provider and kind.",
            ["provider", "kind"],
            registry=registry,
        )
        self._duration = Histogram(
            GC_SWEEP_DURATION,
            "Duration of GC sweeps, skipped ones included.",
            buckets=SWEEP_BUCKETS,
            registry=registry,
        )
        self._last = Gauge(
            GC_LAST_SWEEP,
            "Unix time the last GC sweep finished (0: none yet).",
            registry=registry,
        )

    def deleted(self, provider: str, kind: str) -> None:
        """One instance deleted."""
        self._deletions.labels(provider=provider, kind=kind).inc()

    def swept(self, seconds: float, finished_at: float) -> None:
        """One sweep finished at Unix time `finished_at` after `seconds`."""
        self._duration.observe(seconds)
        self._last.set(finished_at)


async def serve_metrics(registry: CollectorRegistry, host: str, port: int) -> web.AppRunner:
    """Serve `registry` at http://host:port/metrics; stop it with `await runner.cleanup()`.

    The format follows the scraper's Accept header (Prometheus text, or OpenMetrics).
    """

    async def metrics(request: web.Request) -> web.Response:
        encode, content_type = choose_encoder(request.headers.get("Accept", ""))
        return web.Response(body=encode(registry), headers={"Content-Type": content_type})

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, host, port).start()
    return runner
