"""Demand autoscaling as a pure decision: from the pool's demand, the replica count it needs.

Capacity is per {proxy, target} pair (leases/capacity.py): a Proxy carries
`maxLeases` leases for each target, for many targets at once. So utilization
is the busiest target's: the room it takes on the Ready members ÷ the room
they offer one target (the sum of their `maxLeases`). A broad crawl holding
one lease per {proxy, site} pair is at 100 %, as one site holding every proxy
is; three sites on one proxy each of four are at 25 %, with room for each to
spread. With `maxTargets: 1` (exclusive proxies) a proxy held for one target
is full for every other, and utilization is leases ÷ proxies.

Up by `scaleUpStep` when utilization reaches the target, or lease requests
waited at capacity and the busiest target has no room left (while it has,
the waits are answered by spreading), but only
once the previous step is Ready (no stacking steps on capacity still
starting). Down, after `scaleDownDelay` of continuous low use, straight to
`max(minReplicas, busy members + minIdle)`. Any demand in between resets the
delay, so a pool never flaps faster than the delay.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
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


@dataclass(frozen=True)
class Carrier:
    """A Ready, non-draining member as the autoscaler counts it: its bounds and its
    active leases per target (None: leases without a target, a pair of their own)."""

    max_leases: int
    max_targets: int | None
    leases: Mapping[str | None, int]


def busiest_target_leases(carriers: Sequence[Carrier]) -> int:
    """The most room one target takes on the carriers: its leases on each (at most
    maxLeases), and all of a carrier's maxLeases where other targets fill its maxTargets."""
    busiest = 0
    for target in {target for carrier in carriers for target in carrier.leases}:
        taken = 0
        for carrier in carriers:
            held = carrier.leases.get(target, 0)
            if held:
                taken += min(held, carrier.max_leases)
            elif carrier.max_targets is not None and len(carrier.leases) >= carrier.max_targets:
                taken += carrier.max_leases
        busiest = max(busiest, taken)
    return busiest


def pool_demand(carriers: Sequence[Carrier], active_leases: int, waiting_per_minute: int) -> Demand:
    """The pool's demand from its Ready, non-draining members (`carriers`), the leases on
    all its members (draining ones too) and the lease requests that waited."""
    return Demand(
        active_leases=active_leases,
        capacity=sum(carrier.max_leases for carrier in carriers),
        busiest_target_leases=busiest_target_leases(carriers),
        waiting_per_minute=waiting_per_minute,
    )


def utilization_percent(demand: Demand) -> float:
    """The busiest target's room taken ÷ the room for one target, in percent (100 when
    leases exist and no capacity does)."""
    if demand.capacity <= 0:
        return 100.0 if demand.active_leases else 0.0
    return 100.0 * demand.busiest_target_leases / demand.capacity


def decide(policy: Autoscale, seen: ScaleInput) -> ScaleDecision:
    """The replica count the demand asks for."""
    bounded = min(max(seen.replicas, policy.min_replicas), policy.max_replicas)
    if bounded != seen.replicas:
        return ScaleDecision(bounded, UP if bounded > seen.replicas else DOWN, "within bounds")
    utilization = utilization_percent(seen.demand)
    waiting = seen.demand.waiting_per_minute
    # Requests that waited count only while the busiest target has no room: room answers them.
    full = seen.demand.busiest_target_leases >= seen.demand.capacity
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
