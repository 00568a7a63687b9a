"""The time seam: Kubernetes timestamps written and read in one place, and virtual time."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta, timezone

import pytest

from egress_proxies.clock import ManualClock, k8s_micro_time, k8s_time, parse_k8s_time

pytestmark = pytest.mark.unit

MOMENT = datetime(2026, 11, 29, 12, 0, 7, 123456, tzinfo=UTC)


def test_a_kubernetes_time_is_utc_in_whole_seconds() -> None:
    assert k8s_time(MOMENT) == "2026-11-29T12:00:07Z"
    assert k8s_time(MOMENT.astimezone(timezone(timedelta(hours=-7)))) == "2026-11-29T12:00:07Z"


def test_a_kubernetes_micro_time_keeps_the_microseconds() -> None:
    assert k8s_micro_time(MOMENT) == "2026-11-29T12:00:07.123456Z"


@pytest.mark.parametrize(
    ("stamp", "moment"),
    [
        ("2026-11-29T12:00:07Z", MOMENT.replace(microsecond=0)),
        ("2026-11-29T12:00:07.123456Z", MOMENT),
        ("2026-11-29T05:00:07.123456-07:00", MOMENT),
        ("2026-11-29T12:00:07.123456", MOMENT),  # kopf's peering lastseen: read as UTC
    ],
)
def test_a_timestamp_reads_back_as_aware_utc(stamp: str, moment: datetime) -> None:
    parsed = parse_k8s_time(stamp)
    assert parsed == moment
    assert parsed.tzinfo is UTC


def test_what_is_written_reads_back() -> None:
    assert parse_k8s_time(k8s_micro_time(MOMENT)) == MOMENT
    assert parse_k8s_time(k8s_time(MOMENT)) == MOMENT.replace(microsecond=0)


def test_text_that_is_no_timestamp_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="Invalid isoformat"):
        parse_k8s_time("yesterday")


def test_the_manual_clocks_wall_and_monotonic_times_move_together() -> None:
    clock = ManualClock(start=5.0, wall=MOMENT)
    clock.advance(2.5)
    assert clock.monotonic() == 7.5
    assert clock.utcnow() == MOMENT + timedelta(seconds=2.5)
    assert clock.time() == MOMENT.timestamp() + 2.5


async def test_a_sleeper_wakes_when_the_clock_passes_its_deadline() -> None:
    clock = ManualClock()
    assert clock.next_wake is None
    sleeper = asyncio.create_task(clock.sleep(10))
    await asyncio.sleep(0)
    assert clock.next_wake == 10 and clock.sleepers == 1
    clock.advance(9.9)
    await asyncio.sleep(0)
    assert not sleeper.done()
    clock.advance(0.1)
    await sleeper
    assert clock.next_wake is None
    assert repr(clock) == "<ManualClock at 10 s | sleepers: 0>"
