"""What the engine knows about one proxy, and how that knowledge starts."""

from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import datetime

from egress_proxies.catalog import ProxyKey, ProxyRecord
from egress_proxies.health.probe import ProbeResult
from egress_proxies.health.schedule import first_due


@dataclass(frozen=True)
class Instance:
    """What a probe reaches: a new uid or address means a new instance and fresh health."""

    uid: str
    host: str
    port: int

    @classmethod
    def of(cls, record: ProxyRecord) -> Instance:
        """The instance a record points at."""
        return cls(uid=record.uid, host=record.host, port=record.port)


@dataclass(frozen=True)
class Reported:
    """What the operator was last told; it advances only when a report is delivered."""

    healthy: bool
    latency_millis: int | None
    at: float | None  # monotonic time of the delivery; None when seeded from status


@dataclass(frozen=True)
class HealthState:
    """One proxy's health as the engine sees it. Immutable: each probe makes a new one."""

    key: ProxyKey
    instance: Instance
    epoch: int  # distinguishes this state from a pruned or reset predecessor
    healthy: bool | None  # the verdict; None until a threshold is first reached
    next_due: float
    phased: bool  # False until the probe slot is randomised (see schedule.py)
    successes: int = 0  # consecutive
    failures: int = 0  # consecutive
    latency_millis: int | None = None  # of the last successful probe
    last_failure: ProbeResult | None = None
    checked_at: datetime | None = None  # when the last probe finished
    reported: Reported | None = None
    in_flight: bool = False  # queued or probing


def first_sight(record: ProxyRecord, epoch: int, now: float, rng: random.Random) -> HealthState:
    """A proxy the engine has not seen: verdict seeded from its Healthy condition, if any.

    Counters start at zero, so a real transition still needs a full threshold
    run; a seeded proxy's first probe is jittered across the interval, a
    never-probed one probes at once.
    """
    seeded = record.healthy is not None
    return HealthState(
        key=record.key,
        instance=Instance.of(record),
        epoch=epoch,
        healthy=record.healthy,
        next_due=first_due(now, record.health_check.interval_seconds, seeded=seeded, rng=rng),
        phased=seeded,
        latency_millis=record.latency_millis,
        reported=(
            Reported(healthy=record.healthy, latency_millis=record.latency_millis, at=None)
            if record.healthy is not None
            else None
        ),
    )


def replaced(record: ProxyRecord, epoch: int, now: float) -> HealthState:
    """A proxy whose instance changed: nothing known, nothing reported, probed at once."""
    return HealthState(
        key=record.key,
        instance=Instance.of(record),
        epoch=epoch,
        healthy=None,
        next_due=now,
        phased=False,
    )
