"""Prometheus series fed by every health probe (status writes carry transitions only).

Registered on the registry the composition root passes in, never at import
time, so tests use fresh registries. Satisfies `health.ProbeMetrics`
structurally; the health package does not import this module.
"""

from __future__ import annotations

import contextlib

from prometheus_client import CollectorRegistry, Counter, Histogram

from egress_proxies.catalog import ProxyKey

DURATION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
LATENESS_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class PrometheusProbeMetrics:
    """Probe duration and failures per proxy, and how late probes start against schedule."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self._duration = Histogram(
            "egress_proxies_healthcheck_duration_seconds",
            "Duration of each health probe through a proxy, failed ones included.",
            ["proxy"],
            buckets=DURATION_BUCKETS,
            registry=registry,
        )
        self._failures = Counter(
            "egress_proxies_healthcheck_failures",
            "Health probes that failed, per proxy.",
            ["proxy"],
            registry=registry,
        )
        self._lateness = Histogram(
            "egress_proxies_healthcheck_lateness_seconds",
            "How long after its scheduled time each health probe started.",
            buckets=LATENESS_BUCKETS,
            registry=registry,
        )

    def __repr__(self) -> str:
        return "<PrometheusProbeMetrics>"

    def observe_probe(self, key: ProxyKey, seconds: float, *, ok: bool) -> None:
        """One probe: its duration, and a failure unless `ok` (the counter starts at 0)."""
        self._duration.labels(key).observe(seconds)
        failures = self._failures.labels(key)
        if not ok:
            failures.inc()

    def observe_lateness(self, seconds: float) -> None:
        """How late one probe started."""
        self._lateness.observe(max(seconds, 0.0))

    def forget(self, key: ProxyKey) -> None:
        """Delete the proxy's series (it left the fleet); a proxy never probed has none."""
        for metric in (self._duration, self._failures):
            with contextlib.suppress(KeyError):
                metric.remove(key)
