"""The Prometheus probe recorder: series per proxy, deleted when the proxy goes."""

from __future__ import annotations

import gc
import importlib
import re
import time
import tracemalloc

import pytest
from prometheus_client import REGISTRY, CollectorRegistry, Counter, Histogram, generate_latest

from egress_proxies.catalog import proxy_key
from egress_proxies.health import ProbeMetrics
from egress_proxies.telemetry import probe_metrics
from egress_proxies.telemetry.probe_metrics import PrometheusProbeMetrics

pytestmark = pytest.mark.unit

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


def _exposition(registry: CollectorRegistry) -> str:
    """The text a scrape gets, each `_created` time replaced by a marker."""
    return re.sub(
        r"_created(\{[^}]*\})? \S+", r"_created\1 <time>", generate_latest(registry).decode()
    )


def test_the_series_are_written_as_prometheus_clients_own_histogram_and_counter() -> None:
    ours = CollectorRegistry()
    metrics = PrometheusProbeMetrics(ours)
    reference = CollectorRegistry()
    duration = Histogram(
        DURATION,
        "Duration of each health probe through a proxy, failed ones included.",
        ["proxy"],
        buckets=probe_metrics.DURATION_BUCKETS,
        registry=reference,
    )
    failures = Counter(
        "egress_proxies_healthcheck_failures",
        "Health probes that failed, per proxy.",
        ["proxy"],
        registry=reference,
    )
    Histogram(
        "egress_proxies_healthcheck_lateness_seconds",
        "How long after its scheduled time each health probe started.",
        buckets=probe_metrics.LATENESS_BUCKETS,
        registry=reference,
    )
    # On a bound, between bounds, past the last one, failed and not.
    probes = [(A, 0.005, True), (A, 0.02, False), (A, 61.0, True), (B, 0.25, False), (B, 0, True)]
    started = time.time()
    for key, seconds, ok in probes:
        metrics.observe_probe(key, seconds, ok=ok)
        duration.labels(key).observe(seconds)
        failures.labels(key)
        if not ok:
            failures.labels(key).inc()
    assert _exposition(ours) == _exposition(reference)
    created = ours.get_sample_value(f"{DURATION}_created", {"proxy": A})
    assert created is not None and started <= created <= time.time()
    assert ours.get_sample_value(
        "egress_proxies_healthcheck_failures_created", {"proxy": B}
    ) == ours.get_sample_value(f"{DURATION}_created", {"proxy": B})


def test_a_probed_proxys_series_cost_a_fraction_of_a_kibibyte() -> None:
    # prometheus_client's own children cost about 4.2 KiB per proxy (30 locked values).
    metrics = PrometheusProbeMetrics(CollectorRegistry())
    keys = [proxy_key("crawl", f"p{index:05d}") for index in range(1_000)]
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for key in keys:
            metrics.observe_probe(key, 0.02, ok=False)
        gc.collect()
        per_proxy = (tracemalloc.get_traced_memory()[0] - before) / len(keys)
    finally:
        tracemalloc.stop()
    assert per_proxy < 512, per_proxy
