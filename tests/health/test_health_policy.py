"""The pure health rules: seeding, thresholds, and when a report goes out."""

from __future__ import annotations

import random
from dataclasses import replace
from datetime import UTC, datetime

import pytest

from egress_proxies.catalog import ProxyRecord, proxy_key
from egress_proxies.health.policy import (
    HEALTHY_REASON,
    MIN_REPORT_INTERVAL_SECONDS,
    HealthReport,
    Judgement,
    acknowledge,
    judge,
    latency_moved,
)
from egress_proxies.health.probe import Failure, ProbeResult
from egress_proxies.health.state import HealthState, Instance, Reported, first_sight, replaced
from egress_proxies.model import HealthCheck

pytestmark = pytest.mark.unit

CHECK = HealthCheck(url="http://origin.test/", success_threshold=2, failure_threshold=3)
AT = datetime(2026, 1, 1, tzinfo=UTC)


def record(healthy: bool | None = None, latency_millis: int | None = None) -> ProxyRecord:
    return ProxyRecord(
        key=proxy_key("ns", "p"),
        uid="uid-1",
        namespace="ns",
        name="p",
        scheme="http",
        host="127.0.0.2",
        port=3128,
        health_check=CHECK,
        healthy=healthy,
        latency_millis=latency_millis,
    )


def ok(millis: float = 10) -> ProbeResult:
    return ProbeResult(latency_seconds=millis / 1000)


def failed(failure: Failure = Failure.PROXY_UNREACHABLE) -> ProbeResult:
    return ProbeResult(latency_seconds=0.001, failure=failure, detail=f"{failure} detail")


class Run:
    """Feeds probe results through judge(), delivering every report, and keeps them."""

    def __init__(self, state: HealthState) -> None:
        self.state = state
        self.now = 100.0
        self.reports: list[HealthReport] = []

    def probe(self, result: ProbeResult, *, after: float = 10.0, deliver: bool = True) -> Judgement:
        self.now += after
        judgement = judge(self.state, result, CHECK, now=self.now, checked_at=AT)
        self.state = judgement.state
        if judgement.report is not None:
            self.reports.append(judgement.report)
            if deliver:
                self.state = acknowledge(self.state, judgement.report, self.now)
        return judgement


def never_probed() -> Run:
    return Run(first_sight(record(), 1, 100.0, random.Random(1)))


def seeded(healthy: bool, latency_millis: int | None = 10) -> Run:
    return Run(first_sight(record(healthy, latency_millis), 1, 100.0, random.Random(1)))


def test_first_sight_seeds_the_verdict_and_what_was_reported_with_zeroed_counters() -> None:
    state = first_sight(record(True, 42), 7, 100.0, random.Random(1))
    assert (state.healthy, state.successes, state.failures, state.epoch) == (True, 0, 0, 7)
    assert state.reported == Reported(healthy=True, latency_millis=42, at=None)
    assert state.phased
    assert 100.0 <= state.next_due < 100.0 + CHECK.interval_seconds


def test_a_never_probed_proxy_has_no_verdict_and_probes_now() -> None:
    state = first_sight(record(), 1, 100.0, random.Random(1))
    assert (state.healthy, state.reported, state.next_due, state.phased) == (
        None,
        None,
        100.0,
        False,
    )


def test_a_replaced_instance_starts_over_even_if_the_record_was_healthy() -> None:
    state = replaced(replace(record(True, 5), host="127.0.0.9"), 2, 50.0)
    assert state.instance == Instance(uid="uid-1", host="127.0.0.9", port=3128)
    assert (state.healthy, state.reported, state.next_due, state.phased) == (
        None,
        None,
        50.0,
        False,
    )


def test_first_verdict_healthy_needs_exactly_success_threshold_successes() -> None:
    run = never_probed()
    assert run.probe(ok(12)).report is None
    assert run.state.healthy is None
    report = run.probe(ok(12)).report
    assert report == HealthReport(
        key=proxy_key("ns", "p"),
        uid="uid-1",
        healthy=True,
        latency_millis=12,
        checked_at=AT,
        reason=HEALTHY_REASON,
        message="probe through the proxy succeeded in 12 ms",
    )


def test_first_verdict_unhealthy_needs_exactly_failure_threshold_failures() -> None:
    run = never_probed()
    for _ in range(CHECK.failure_threshold - 1):
        assert run.probe(failed()).report is None
    report = run.probe(failed(Failure.TIMEOUT)).report
    assert report is not None
    assert (report.healthy, report.latency_millis, report.reason, report.message) == (
        False,
        None,
        "ProbeTimeout",
        "ProbeTimeout detail",
    )


def test_a_seeded_healthy_proxy_stays_quiet_while_it_stays_healthy() -> None:
    run = seeded(True, latency_millis=10)
    for result in [ok(11), failed(), failed(), ok(9), ok(10), failed(), ok(12)]:
        run.probe(result)
    assert run.reports == []
    assert run.state.healthy is True


def test_flips_happen_at_the_thresholds_and_report_once_each() -> None:
    run = seeded(True)
    verdicts = []
    for result in [failed()] * 4 + [ok()] * 3 + [failed()] * 3:
        run.probe(result)
        verdicts.append(run.state.healthy)
    assert verdicts == [True, True, False, False, False, True, True, True, True, False]
    assert [report.healthy for report in run.reports] == [False, True, False]


def test_a_success_streak_below_threshold_reports_nothing_for_an_unhealthy_proxy() -> None:
    run = seeded(False, latency_millis=None)
    assert run.probe(ok(500)).report is None  # latency moved, but the verdict is unhealthy
    assert run.probe(failed()).report is None
    assert run.probe(ok(5)).report is None
    assert run.probe(ok(5)).report is not None


@pytest.mark.parametrize(
    ("reported", "current", "moved"),
    [
        (None, 5, True),
        (10, 30, False),  # +20 ms is not more than the 20 ms floor
        (10, 31, True),
        (10, 0, False),
        (100, 150, False),  # +50% is not more than 50%
        (100, 151, True),
        (100, 49, True),
        (0, 20, False),
        (0, 21, True),
    ],
)
def test_latency_moves_by_more_than_20ms_and_50_percent(
    reported: int | None, current: int, moved: bool
) -> None:
    assert latency_moved(reported, current) is moved


def test_a_latency_change_while_healthy_is_reported_at_most_once_a_minute() -> None:
    run = never_probed()
    run.probe(ok(10))
    run.probe(ok(10))
    assert [report.latency_millis for report in run.reports] == [10]
    reported_at = run.now
    for _ in range(5):
        assert run.probe(ok(100), after=10).report is None  # 10 to 50 s after the report
    assert run.probe(ok(100), after=9.9).report is None  # 59.9 s
    report = run.probe(ok(100), after=0.1).report  # 60 s
    assert report is not None and report.latency_millis == 100
    assert run.state.reported == Reported(healthy=True, latency_millis=100, at=reported_at + 60)
    assert run.probe(ok(101), after=MIN_REPORT_INTERVAL_SECONDS).report is None  # not moved


def test_a_status_latency_seeded_on_restart_is_not_rate_limited() -> None:
    run = seeded(True, latency_millis=10)
    report = run.probe(ok(80)).report
    assert report is not None and (report.healthy, report.latency_millis) == (True, 80)


def test_a_latency_change_is_not_reported_on_a_failed_probe() -> None:
    run = seeded(True, latency_millis=10)
    assert run.probe(failed()).report is None


def test_an_undelivered_report_is_produced_again_by_the_next_probe() -> None:
    run = seeded(True)
    run.probe(failed())
    run.probe(failed())
    first = run.probe(failed(), deliver=False).report
    assert first is not None and not first.healthy
    assert run.state.reported == Reported(healthy=True, latency_millis=10, at=None)
    again = run.probe(ok(), deliver=True).report  # one success is below the threshold
    assert again is not None and not again.healthy and again.reason == first.reason
    assert run.state.reported is not None and run.state.reported.healthy is False
    assert run.probe(failed()).report is None


def test_an_undelivered_latency_report_is_retried_without_waiting_a_minute() -> None:
    run = seeded(True, latency_millis=10)
    assert run.probe(ok(90), deliver=False).report is not None
    assert run.probe(ok(90), after=1).report is not None


def test_acknowledge_records_what_was_reported_and_when() -> None:
    run = never_probed()
    run.probe(ok(7), deliver=False)
    judgement = run.probe(ok(7), deliver=False)
    assert judgement.report is not None
    state = acknowledge(judgement.state, judgement.report, 123.0)
    assert state.reported == Reported(healthy=True, latency_millis=7, at=123.0)
