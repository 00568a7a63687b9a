"""What the engine records for every probe; telemetry's Prometheus recorder satisfies it."""

from __future__ import annotations

from typing import Protocol

from egress_proxies.catalog import ProxyKey


class ProbeMetrics(Protocol):
    """A sink for per-probe observations (status writes carry transitions only)."""

    def observe_probe(self, key: ProxyKey, seconds: float, *, ok: bool) -> None:
        """Record one probe's duration and whether it failed."""
        ...

    def observe_lateness(self, seconds: float) -> None:
        """Record how late a probe started against its schedule."""
        ...

    def forget(self, key: ProxyKey) -> None:
        """Delete a proxy's series: it is gone from the fleet."""
        ...
