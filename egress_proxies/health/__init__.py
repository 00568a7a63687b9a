"""The health engine: probes every proxy through the proxy.

`HealthEngine` schedules probes over the catalog and emits a `HealthReport`
only on a first verdict, a threshold flip or a significant latency change;
`HttpProber` is the real through-the-proxy probe. See docs/health.md.
"""

from egress_proxies.health.engine import DEFAULT_WORKERS, HealthEngine, HealthSink
from egress_proxies.health.http_prober import HttpProber
from egress_proxies.health.metrics import ProbeMetrics
from egress_proxies.health.policy import HEALTHY_REASON, HealthReport
from egress_proxies.health.probe import Failure, Prober, ProbeResult
from egress_proxies.health.state import HealthState, Instance, Reported

__all__ = [
    "DEFAULT_WORKERS",
    "HEALTHY_REASON",
    "Failure",
    "HealthEngine",
    "HealthReport",
    "HealthSink",
    "HealthState",
    "HttpProber",
    "Instance",
    "ProbeMetrics",
    "ProbeResult",
    "Prober",
    "Reported",
]
