"""The Prometheus probe recorder: series per proxy, deleted when the proxy goes."""

from __future__ import annotations

import importlib

from prometheus_client import REGISTRY, CollectorRegistry

from egress_proxies.catalog import proxy_key
from egress_proxies.health import ProbeMetrics
from egress_proxies.telemetry import probe_metrics
from egress_proxies.telemetry.probe_metrics import PrometheusProbeMetrics

A, B = proxy_key("ns", "a"), proxy_key("ns", "b")
DURATION = "egress_proxies_healthcheck_duration_seconds"
FAILURES = "egress_proxies_healthcheck_failures_total"


def test_every_probe_is_observed_and_failures_counted_per_proxy() -> None:
    registry = CollectorRegistry()
    metrics: ProbeMetrics = PrometheusProbeMetrics(registry)
    metrics.observe_probe(A, 0.02, ok=True)
    metrics.observe_probe(A, 5.0, ok=False)
    metrics.observe_probe(B, 0.01, ok=True)
    assert registry.get_sample_value(f"{DURATION}_count", {"proxy": A}) == 2
    assert registry.get_sample_value(f"{DURATION}_sum", {"proxy": A}) == 5.02
    assert registry.get_sample_value(f"{DURATION}_bucket", {"proxy": A, "le": "0.025"}) == 1
    assert registry.get_sample_value(FAILURES, {"proxy": A}) == 1
    assert registry.get_sample_value(FAILURES, {"proxy": B}) == 0, "starts at 0, not absent"


def test_forget_deletes_only_that_proxys_series_and_tolerates_unknown_ones() -> None:
    registry = CollectorRegistry()
    metrics = PrometheusProbeMetrics(registry)
    metrics.observe_probe(A, 0.02, ok=False)
    metrics.observe_probe(B, 0.02, ok=False)
    metrics.forget(A)
    metrics.forget(proxy_key("ns", "never-probed"))
    assert registry.get_sample_value(f"{DURATION}_count", {"proxy": A}) is None
    assert registry.get_sample_value(FAILURES, {"proxy": A}) is None
    assert registry.get_sample_value(FAILURES, {"proxy": B}) == 1


def test_lateness_is_one_unlabelled_histogram_clamped_at_zero() -> None:
    registry = CollectorRegistry()
    metrics = PrometheusProbeMetrics(registry)
    metrics.observe_lateness(-0.001)
    metrics.observe_lateness(0.3)
    name = "egress_proxies_healthcheck_lateness_seconds"
    assert registry.get_sample_value(f"{name}_count") == 2
    assert registry.get_sample_value(f"{name}_bucket", {"le": "0.01"}) == 1


def test_nothing_is_registered_at_import_time() -> None:
    before = set(REGISTRY._names_to_collectors)
    importlib.reload(probe_metrics)
    assert set(REGISTRY._names_to_collectors) == before
    PrometheusProbeMetrics(CollectorRegistry())
    PrometheusProbeMetrics(CollectorRegistry())  # no clash: nothing global
