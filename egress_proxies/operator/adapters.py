"""Small wrappers that fit one component's interface to another's needs."""

from __future__ import annotations

from egress_proxies.catalog import ProxyRecord
from egress_proxies.health import Prober, ProbeResult
from egress_proxies.telemetry.tracing import Spans


class TracedProber:
    """A probe span around each probe (no-op unless probe tracing is on)."""

    def __init__(self, prober: Prober, spans: Spans) -> None:
        self._prober = prober
        self._spans = spans

    async def probe(self, record: ProxyRecord) -> ProbeResult:
        """Probe `record` inside a span."""
        with self._spans.probe(record.key):
            return await self._prober.probe(record)
