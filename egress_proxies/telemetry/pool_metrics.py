"""Pool metrics: autoscaling decisions and drained Proxies, by pool and reason."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter

POOL_SCALING = "egress_proxies_pool_scaling_decisions"
POOL_DRAINS = "egress_proxies_pool_drains"


class PoolMetrics:
    """Counters the pool controller feeds (satisfies its ScalingRecorder Protocol)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self._scaling = Counter(
            POOL_SCALING,
            "Autoscaling decisions by pool and direction (ScaledUp, ScaledDown).",
            ["pool", "direction"],
            registry=registry,
        )
        self._drains = Counter(
            POOL_DRAINS,
            "Proxies drained by pool and reason (ScaledDown, TemplateChanged, Banned, MaxAge).",
            ["pool", "reason"],
            registry=registry,
        )

    def scaled(self, pool: str, direction: str) -> None:
        """One autoscaling decision."""
        self._scaling.labels(pool=pool, direction=direction).inc()

    def drained(self, pool: str, reason: str) -> None:
        """One Proxy drained."""
        self._drains.labels(pool=pool, reason=reason).inc()
