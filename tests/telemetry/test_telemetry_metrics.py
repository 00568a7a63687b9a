"""The operator registry: every series on a fresh registry, scraped over HTTP with exact values."""

from __future__ import annotations

import json
import re
import socket
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from prometheus_client import REGISTRY, CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from egress_proxies.catalog import proxy_key
from egress_proxies.leases import LeaseCounts
from egress_proxies.model import ProviderName
from egress_proxies.providers.inventory import (
    InstanceId,
    InventoryError,
    InventoryListing,
    PartialFailure,
)
from egress_proxies.stacks.runner import StackOperationError
from egress_proxies.telemetry.metrics import (
    GC_DELETIONS,
    GC_LAST_SWEEP,
    GC_SWEEP_DURATION,
    PROVIDER_REQUESTS,
    PROXIES,
    STACK_OPERATION_DURATION,
    STACK_OPERATIONS,
    MeteredInventory,
    OperatorMetrics,
    serve_metrics,
)

pytestmark = pytest.mark.unit


class Leases:
    """A lease store stand-in with fixed counts."""

    def __init__(self, leases: int = 0, cooldowns: int = 0) -> None:
        self.leases, self.cooldowns = leases, cooldowns

    def last_counts(self) -> LeaseCounts:
        return LeaseCounts(leases=self.leases, cooldowns=self.cooldowns)


def body(name: str, phase: str | None) -> Mapping[str, Any]:
    status = {"phase": phase} if phase else {}
    return {"metadata": {"namespace": "crawl", "name": name}, "status": status}


def build(
    proxies: list[Mapping[str, Any]] | None = None, leases: Leases | None = None
) -> tuple[CollectorRegistry, OperatorMetrics]:
    registry = CollectorRegistry()
    fleet = proxies if proxies is not None else []
    return registry, OperatorMetrics(registry, proxies=lambda: fleet, leases=leases or Leases())


def test_proxies_by_phase_are_read_at_scrape_time_and_every_phase_is_exported() -> None:
    fleet = [body("a", "Ready"), body("b", "Ready"), body("c", "Unhealthy"), body("d", None)]
    registry, _ = build(fleet)
    phases = {"Pending", "Provisioning", "Provisioned", "Ready", "Unhealthy", "Failed", "Deleting"}
    values = {phase: registry.get_sample_value(PROXIES, {"phase": phase}) for phase in phases}
    assert values == {phase: 0.0 for phase in phases} | {
        "Ready": 2.0,
        "Unhealthy": 1.0,
        "Pending": 1.0,
    }
    fleet.pop()
    fleet[0] = body("a", "Deleting")
    assert registry.get_sample_value(PROXIES, {"phase": "Ready"}) == 1
    assert registry.get_sample_value(PROXIES, {"phase": "Deleting"}) == 1
    assert registry.get_sample_value(PROXIES, {"phase": "Pending"}) == 0


def test_stack_operations_are_counted_by_op_and_result_with_durations() -> None:
    registry, metrics = build()
    with metrics.stacks.measure("up"):
        pass
    with pytest.raises(StackOperationError), metrics.stacks.measure("up"):
        raise StackOperationError("up", "crawl.p1", 'pods "p" is forbidden: denied')
    with pytest.raises(StackOperationError), metrics.stacks.measure("destroy"):
        raise StackOperationError("destroy", "crawl.p1", "error: connection reset by peer")
    with pytest.raises(RuntimeError), metrics.stacks.measure("refresh"):
        raise RuntimeError("boom")
    metrics.stacks.observe("up", "ok", 12.0)
    total = f"{STACK_OPERATIONS}_total"
    assert registry.get_sample_value(total, {"op": "up", "result": "ok"}) == 2
    assert registry.get_sample_value(total, {"op": "up", "result": "permanent"}) == 1
    assert registry.get_sample_value(total, {"op": "destroy", "result": "transient"}) == 1
    assert registry.get_sample_value(total, {"op": "refresh", "result": "error"}) == 1
    count = f"{STACK_OPERATION_DURATION}_count"
    assert registry.get_sample_value(count, {"op": "up"}) == 3
    assert (
        registry.get_sample_value(f"{STACK_OPERATION_DURATION}_bucket", {"op": "up", "le": "10.0"})
        == 2
    )


class FakeInventory:
    """An inventory whose answers the test scripts."""

    def __init__(self) -> None:
        self.listing = InventoryListing(ProviderName.KUBERNETES, ())
        self.fail = False

    @property
    def provider(self) -> ProviderName:
        return ProviderName.KUBERNETES

    async def list_tagged(self) -> InventoryListing:
        if self.fail:
            raise InventoryError("unreachable")
        return self.listing

    async def delete(self, instance_id: InstanceId) -> None:
        if self.fail:
            raise InventoryError("denied")


async def test_inventory_calls_are_counted_by_provider_op_and_result() -> None:
    registry, metrics = build()
    inner = FakeInventory()
    inventory = MeteredInventory(inner, metrics.providers)
    assert inventory.provider == ProviderName.KUBERNETES
    assert await inventory.list_tagged() is inner.listing
    inner.listing = InventoryListing(
        ProviderName.KUBERNETES, (), (PartialFailure("zones/x", "timeout"),)
    )
    await inventory.list_tagged()
    await inventory.delete(InstanceId("pods/crawl/p"))
    inner.fail = True
    with pytest.raises(InventoryError):
        await inventory.list_tagged()
    with pytest.raises(InventoryError):
        await inventory.delete(InstanceId("pods/crawl/p"))
    total = f"{PROVIDER_REQUESTS}_total"

    def value(op: str, result: str) -> float | None:
        labels = {"provider": "kubernetes", "op": op, "result": result}
        return registry.get_sample_value(total, labels)

    assert [value("list", r) for r in ("ok", "partial", "error")] == [1, 1, 1]
    assert [value("delete", r) for r in ("ok", "error")] == [1, 1]


def test_gc_deletions_sweep_duration_and_last_sweep() -> None:
    registry, metrics = build()
    assert registry.get_sample_value(GC_LAST_SWEEP) == 0
    metrics.gc.deleted(ProviderName.KUBERNETES, "pods")
    metrics.gc.deleted("kubernetes", "pods")
    metrics.gc.deleted("gcp", "zones")
    metrics.gc.swept(0.3, 1_700_000_000.0)
    metrics.gc.swept(0.7, 1_700_000_600.0)
    total = f"{GC_DELETIONS}_total"
    assert registry.get_sample_value(total, {"provider": "kubernetes", "kind": "pods"}) == 2
    assert registry.get_sample_value(total, {"provider": "gcp", "kind": "zones"}) == 1
    assert registry.get_sample_value(f"{GC_SWEEP_DURATION}_count") == 2
    assert registry.get_sample_value(f"{GC_SWEEP_DURATION}_sum") == pytest.approx(1.0)
    assert registry.get_sample_value(GC_LAST_SWEEP) == 1_700_000_600.0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


async def test_metrics_endpoint_serves_every_series_in_the_text_format() -> None:
    fleet = [body("a", "Ready"), body("b", "Unhealthy")]
    registry, metrics = build(fleet, Leases(leases=3, cooldowns=1))
    metrics.probes.observe_probe(proxy_key("crawl", "b"), 0.2, ok=False)
    metrics.leases.lease_request("granted")
    metrics.gc.deleted("kubernetes", "pods")
    port = free_port()
    runner = await serve_metrics(registry, "127.0.0.1", port)
    try:
        async with aiohttp.ClientSession() as session:
            async with session.get(f"http://127.0.0.1:{port}/metrics") as response:
                assert response.status == 200
                assert response.headers["Content-Type"].startswith("text/plain")
                text = await response.text()
            async with session.get(
                f"http://127.0.0.1:{port}/metrics",
                headers={"Accept": "application/openmetrics-text"},
            ) as response:
                assert response.headers["Content-Type"].startswith("application/openmetrics-text")
    finally:
        await runner.cleanup()
    samples = {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }
    assert samples[(PROXIES, (("phase", "Ready"),))] == 1
    assert samples[(PROXIES, (("phase", "Unhealthy"),))] == 1
    assert samples[("egress_proxies_leases_active", ())] == 3
    assert samples[("egress_proxies_lease_cooldowns_active", ())] == 1
    assert samples[("egress_proxies_lease_requests_total", (("outcome", "granted"),))] == 1
    assert samples[("egress_proxies_healthcheck_failures_total", (("proxy", "crawl/b"),))] == 1
    assert (
        samples[("egress_proxies_healthcheck_duration_seconds_count", (("proxy", "crawl/b"),))] == 1
    )
    assert samples[(f"{GC_DELETIONS}_total", (("kind", "pods"), ("provider", "kubernetes")))] == 1
    assert samples[(GC_LAST_SWEEP, ())] == 0


def test_nothing_lands_on_the_global_registry() -> None:
    _, metrics = build([body("a", "Ready")])
    metrics.stacks.observe("up", "ok", 1.0)
    metrics.gc.swept(1.0, 1.0)
    assert REGISTRY.get_sample_value(PROXIES, {"phase": "Ready"}) is None
    assert (
        REGISTRY.get_sample_value(f"{STACK_OPERATIONS}_total", {"op": "up", "result": "ok"}) is None
    )
    assert REGISTRY.get_sample_value(GC_LAST_SWEEP) is None


DASHBOARD = (
    Path(__file__).resolve().parents[2] / "deploy" / "grafana" / "egress-proxies-dashboard.json"
)


def test_the_dashboard_queries_only_series_the_registry_exports() -> None:
    registry, metrics = build([body("a", "Ready")])
    metrics.probes.observe_probe(proxy_key("crawl", "a"), 0.1, ok=False)
    metrics.probes.observe_lateness(0.1)
    metrics.leases.lease_request("granted")
    metrics.leases.lease_report("banned", "captcha")
    metrics.stacks.observe("up", "ok", 1.0)
    metrics.providers.request("kubernetes", "list", "ok")
    metrics.gc.deleted("kubernetes", "pods")
    metrics.gc.swept(1.0, 1.0)
    exported = {sample.name for family in registry.collect() for sample in family.samples}
    dashboard = json.loads(DASHBOARD.read_text())
    queried = {
        name
        for panel in dashboard["panels"]
        for target in panel.get("targets", [])
        for name in re.findall(r"\begress_proxies_\w+", target["expr"])
    }
    assert queried, "the dashboard queries nothing"
    assert queried <= exported, f"not exported: {sorted(queried - exported)}"
    families = {family.name for family in registry.collect()}
    charted = {re.sub(r"_(bucket|sum|count|total)$", "", name) for name in queried}
    assert families <= charted, f"exported but not charted: {sorted(families - charted)}"
