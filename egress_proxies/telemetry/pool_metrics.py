"""Pool metrics: rounds, autoscaling decisions and drained Proxies, by pool and reason."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter

POOL_SCALING = "egress_proxies_pool_scaling_decisions"
POOL_DRAINS = "egress_proxies_pool_drains"
POOL_ROUNDS = "egress_proxies_pool_rounds"


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

        self._rounds = Counter(
            POOL_ROUNDS,
            "Pool controller rounds by pool and outcome (converged; unsynced: skipped, the "
            "operator's Proxy watch had not delivered its whole list).",
            ["pool", "outcome"],
            registry=registry,
        )

    def round(self, pool: str, outcome: str) -> None:
        """One round, run or skipped."""
        self._rounds.labels(pool=pool, outcome=outcome).inc()

    def scaled(self, pool: str, direction: str) -> None:
        """One autoscaling decision."""
        self._scaling.labels(pool=pool, direction=direction).inc()

    def drained(self, pool: str, reason: str) -> None:
        """One Proxy drained."""
        self._drains.labels(pool=pool, reason=reason).inc()
