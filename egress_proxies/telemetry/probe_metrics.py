"""Prometheus series fed by every health probe (status writes carry transitions only).

Registered on the registry the composition root passes in, never at import
time, so tests use fresh registries. Satisfies `health.ProbeMetrics`
structurally; the health package does not import this module.

The per-proxy series (a duration histogram and a failure counter per proxy)
are a custom collector over one small array of numbers per proxy, exported
at scrape time exactly as prometheus_client's own Histogram and Counter
children would be (buckets, `_count`, `_sum`, `_total` and each child's
`_created`). The library's children cost about 4.2 KiB per proxy, 30 value
objects each with its own lock; the array costs about 0.2 KiB, and one lock
guards them all (docs/operator.md "Memory").
"""

from __future__ import annotations

import threading
import time
from array import array
from bisect import bisect_left
from collections.abc import Iterable, Iterator

from prometheus_client import CollectorRegistry, Histogram
from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from egress_proxies.catalog import ProxyKey

DURATION = "egress_proxies_healthcheck_duration_seconds"
FAILURES = "egress_proxies_healthcheck_failures"
DURATION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
LATENESS_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)

# One proxy's numbers: a count per bucket (the last is +Inf, not cumulative), then these.
_SUM = len(DURATION_BUCKETS) + 1
_FAILED = _SUM + 1
_CREATED = _FAILED + 1
_SLOTS = _CREATED + 1
# The `le` labels as prometheus_client writes them (its floatToGoString: "0.005", "10.0").
_BOUNDS = [*(repr(float(bound)) for bound in DURATION_BUCKETS), "+Inf"]


class ProbeSeries(Collector):
    """The duration histogram and failure counter of every probed proxy, one array each."""

    def __init__(self) -> None:
        self._lock = threading.Lock()  # probes write on the event loop, scrapes read elsewhere
        self._series: dict[ProxyKey, array[float]] = {}

    def __repr__(self) -> str:
        return f"<ProbeSeries [proxies: {len(self._series)}]>"

    def observe(self, key: ProxyKey, seconds: float, *, ok: bool) -> None:
        """One probe of `key`: its duration, and a failure unless `ok`."""
        with self._lock:
            values = self._series.get(key)
            if values is None:
                values = self._series[key] = array("d", bytes(8 * _SLOTS))
                values[_CREATED] = time.time()
            # A bucket's bound is inclusive (le), as prometheus_client's Histogram counts it.
            values[bisect_left(DURATION_BUCKETS, seconds)] += 1
            values[_SUM] += seconds
            if not ok:
                values[_FAILED] += 1

    def forget(self, key: ProxyKey) -> None:
        """Drop the proxy's series; a proxy never probed has none."""
        with self._lock:
            self._series.pop(key, None)

    def describe(self) -> Iterable[Metric]:
        """The two families, without samples (for the registry's name check)."""
        return self._families({})

    def collect(self) -> Iterable[Metric]:
        """Both families with every proxy's samples, read under the lock."""
        with self._lock:
            copies = {key: values[:] for key, values in self._series.items()}
        return self._families(copies)

    @staticmethod
    def _families(series: dict[ProxyKey, array[float]]) -> Iterator[Metric]:
        duration = HistogramMetricFamily(
            DURATION,
            "Duration of each health probe through a proxy, failed ones included.",
            labels=["proxy"],
        )
        failures = CounterMetricFamily(
            FAILURES, "Health probes that failed, per proxy.", labels=["proxy"]
        )
        for key, values in series.items():
            cumulative, buckets = 0.0, []
            for bound, count in zip(_BOUNDS, values[:_SUM], strict=True):
                cumulative += count
                buckets.append((bound, cumulative))
            duration.add_metric([key], buckets, values[_SUM])
            duration.add_sample(f"{DURATION}_created", {"proxy": key}, values[_CREATED])
            failures.add_metric([key], values[_FAILED], created=values[_CREATED])
        yield duration
        yield failures


class PrometheusProbeMetrics:
    """Probe duration and failures per proxy, and how late probes start against schedule."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self._series = ProbeSeries()
        registry.register(self._series)
        self._lateness = Histogram(
            "egress_proxies_healthcheck_lateness_seconds",
            "How long after its scheduled time each health probe started.",
            buckets=LATENESS_BUCKETS,
            registry=registry,
        )

    def __repr__(self) -> str:
        return f"<PrometheusProbeMetrics {self._series!r}>"

    def observe_probe(self, key: ProxyKey, seconds: float, *, ok: bool) -> None:
        """One probe: its duration, and a failure unless `ok` (the counter starts at 0)."""
        self._series.observe(key, seconds, ok=ok)

    def observe_lateness(self, seconds: float) -> None:
        """How late one probe started."""
        self._lateness.observe(max(seconds, 0.0))

    def forget(self, key: ProxyKey) -> None:
        """Delete the proxy's series (it left the fleet); a proxy never probed has none."""
        self._series.forget(key)
