"""Demand autoscaling as a pure decision: from the pool's demand, the replica count it needs.

Up by `scaleUpStep` when utilization (active leases ÷ capacity of the Ready
members) reaches the target, or lease requests waited at capacity and no
lease is free now (a free one answers them), but only
once the previous step is Ready (no stacking steps on capacity still
starting). Down, after `scaleDownDelay` of continuous low use, straight to
`max(minReplicas, busy members + minIdle)`. Any demand in between resets the
delay, so a pool never flaps faster than the delay.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from egress_proxies.pool_model import Autoscale, Demand

UP, DOWN = "ScaledUp", "ScaledDown"
AT_MAX = "AtMaxReplicas"


@dataclass(frozen=True)
class ScaleInput:
    """What the autoscaler sees this round."""

    replicas: int
    demand: Demand
    busy: int  # members holding at least one lease
    settled: bool  # every non-draining member is Ready
    low_use_since: datetime | None
    now: datetime


@dataclass(frozen=True)
class ScaleDecision:
    """The replicas wanted, why they changed (None: unchanged), and the low-use clock."""

    replicas: int
    reason: str | None = None
    message: str = ""
    low_use_since: datetime | None = None
    limited: str | None = None  # AtMaxReplicas while demand asks for more


def utilization_percent(demand: Demand) -> float:
    """Active leases ÷ capacity, in percent (100 when leases exist and no capacity does)."""
    if demand.capacity <= 0:
        return 100.0 if demand.active_leases else 0.0
    return 100.0 * demand.active_leases / demand.capacity


def decide(policy: Autoscale, seen: ScaleInput) -> ScaleDecision:
    """The replica count the demand asks for."""
    bounded = min(max(seen.replicas, policy.min_replicas), policy.max_replicas)
    if bounded != seen.replicas:
        return ScaleDecision(bounded, UP if bounded > seen.replicas else DOWN, "within bounds")
    utilization = utilization_percent(seen.demand)
    waiting = seen.demand.waiting_per_minute
    # Requests that waited count only while no lease is free: a free one answers them.
    full = seen.demand.active_leases >= seen.demand.capacity
    if (full and waiting >= policy.scale_up_on_waiting) or (
        utilization >= policy.target_utilization_percent
    ):
        why = f"utilization {utilization:.0f}%, {waiting} lease requests waiting per minute"
        if seen.replicas >= policy.max_replicas:
            return ScaleDecision(seen.replicas, limited=AT_MAX, message=why)
        if not seen.settled:
            return ScaleDecision(seen.replicas, message=why)
        wanted = min(policy.max_replicas, seen.replicas + policy.scale_up_step)
        return ScaleDecision(wanted, UP, why)
    enough = max(policy.min_replicas, seen.busy + policy.min_idle)
    if enough >= seen.replicas:
        return ScaleDecision(seen.replicas)
    since = seen.now if seen.low_use_since is None else seen.low_use_since
    low_for = (seen.now - since).total_seconds()
    if low_for < policy.scale_down_delay_seconds:
        return ScaleDecision(seen.replicas, low_use_since=since)
    why = (
        f"{seen.busy} of {seen.replicas} proxies leased (utilization {utilization:.0f}%) for "
        f"{low_for:.0f}s; keeping {policy.min_idle} idle"
    )
    return ScaleDecision(enough, DOWN, why)
