"""Thresholds and emission rules: from a probe result to a verdict and maybe a report (pure).

A report goes out only on the first verdict, on a threshold flip, or — while
healthy — when latency moved by more than max(20 ms, 50% of the last
reported value), at most once per 60 s. A report that could not be
delivered leaves the reported markers where they were, so the next probe
produces it again.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime

from egress_proxies.catalog import ProxyKey
from egress_proxies.health.probe import ProbeResult
from egress_proxies.health.state import HealthState, Reported
from egress_proxies.model import HealthCheck

MIN_REPORT_INTERVAL_SECONDS = 60.0
MIN_LATENCY_CHANGE_MILLIS = 20
LATENCY_CHANGE_RATIO = 0.5
HEALTHY_REASON = "ProbeSucceeded"


@dataclass(frozen=True)
class HealthReport:
    """One status-affecting verdict: the Healthy condition, latencyMillis, lastHealthCheckTime.

    latency_millis is the last successful probe's when healthy, None when unhealthy.
    """

    key: ProxyKey
    uid: str
    healthy: bool
    latency_millis: int | None
    checked_at: datetime
    reason: str
    message: str


@dataclass(frozen=True)
class Judgement:
    """The state after a probe, and the report it calls for, if any."""

    state: HealthState
    report: HealthReport | None


def judge(
    state: HealthState, result: ProbeResult, check: HealthCheck, *, now: float, checked_at: datetime
) -> Judgement:
    """Count the result, flip the verdict at a threshold, and decide whether to report."""
    if result.ok:
        state = replace(
            state,
            successes=state.successes + 1,
            failures=0,
            latency_millis=round(result.latency_seconds * 1000),
            checked_at=checked_at,
        )
    else:
        state = replace(
            state,
            successes=0,
            failures=state.failures + 1,
            last_failure=result,
            checked_at=checked_at,
        )
    if state.successes >= check.success_threshold:
        state = replace(state, healthy=True)
    elif state.failures >= check.failure_threshold:
        state = replace(state, healthy=False)
    return Judgement(state, _report(state, checked_at) if _due(state, result, now) else None)


def acknowledge(state: HealthState, report: HealthReport, now: float) -> HealthState:
    """The report was delivered: it becomes what was last reported."""
    return replace(
        state,
        reported=Reported(healthy=report.healthy, latency_millis=report.latency_millis, at=now),
    )


def latency_moved(reported: int | None, current: int) -> bool:
    """True when `current` differs from `reported` by more than max(20 ms, 50%)."""
    if reported is None:
        return True
    return abs(current - reported) > max(MIN_LATENCY_CHANGE_MILLIS, reported * LATENCY_CHANGE_RATIO)


def _due(state: HealthState, result: ProbeResult, now: float) -> bool:
    if state.healthy is None:
        return False
    reported = state.reported
    if reported is None or reported.healthy != state.healthy:
        return True  # the first verdict, a flip, or one not yet delivered
    return (
        state.healthy
        and result.ok
        and state.latency_millis is not None
        and latency_moved(reported.latency_millis, state.latency_millis)
        and (reported.at is None or now - reported.at >= MIN_REPORT_INTERVAL_SECONDS)
    )


def _report(state: HealthState, checked_at: datetime) -> HealthReport:
    if state.healthy:
        return HealthReport(
            key=state.key,
            uid=state.instance.uid,
            healthy=True,
            latency_millis=state.latency_millis,
            checked_at=checked_at,
            reason=HEALTHY_REASON,
            message=f"probe through the proxy succeeded in {state.latency_millis} ms",
        )
    failure = state.last_failure
    # A verdict seeded unhealthy is also reported unhealthy; any other comes from failures.
    assert failure is not None and failure.failure is not None
    return HealthReport(
        key=state.key,
        uid=state.instance.uid,
        healthy=False,
        latency_millis=None,
        checked_at=checked_at,
        reason=failure.failure.value,
        message=failure.detail,
    )
