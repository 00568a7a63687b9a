"""The operator's telemetry options: the metrics endpoint and probe spans.

Logging (`EGRESS_PROXIES_LOG_FORMAT`, `..._LOG_LEVEL`) and tracing (`OTEL_*`)
read their own variables from the process environment (`environment.py`).
"""

from __future__ import annotations

from typing import ClassVar

from egress_proxies.settings.options import Options, option


class TelemetrySettings(Options):
    """What the operator exports about itself beyond logs."""

    title: ClassVar[str] = "telemetry"

    metrics_port: int = option(
        9090, "serve Prometheus metrics at /metrics on this port (0 = off)", ge=0, le=65535
    )
    trace_health_probes: bool = option(
        False, "one span per health probe (only when tracing is enabled by OTEL_* variables)"
    )
