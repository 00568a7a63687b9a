"""The health status pump: failed writes are retried, newer reports win, a paused operator holds."""

from __future__ import annotations

import asyncio
import contextlib
import datetime
from collections.abc import AsyncIterator, Mapping
from typing import Any

import pytest

from egress_proxies.catalog import proxy_key
from egress_proxies.catalog.fleet import Fleet
from egress_proxies.clock import ManualClock
from egress_proxies.health import HealthReport
from egress_proxies.kube import KubeApiError, TransportError
from egress_proxies.model import HEALTHY, ConditionStatus, ProxyStatus
from egress_proxies.proxies.health_status import (
    PAUSED_RECHECK_SECONDS,
    HealthStatusPump,
    retry_delay,
)
from egress_proxies.proxies.status import Mutation

pytestmark = pytest.mark.unit

CHECKED = datetime.datetime(2026, 11, 29, 12, 0, tzinfo=datetime.UTC)


class FlakyWriter:
    """A status writer whose next `fail` writes raise, as an unreachable API server would."""

    def __init__(self) -> None:
        self.fail = 0
        self.attempts = 0
        self.written: list[ProxyStatus] = []

    async def update(self, body: Mapping[str, Any], mutate: Mutation) -> ProxyStatus:
        self.attempts += 1
        if self.fail:
            self.fail -= 1
            raise (
                KubeApiError(503, "ServiceUnavailable", "etcd") if self.fail % 2 else OSError(111)
            )
        status = mutate(ProxyStatus())
        self.written.append(status)
        return status

    def verdicts(self) -> list[ConditionStatus]:
        return [c.status for s in self.written for c in s.conditions if c.type == HEALTHY]


class Gate:
    """Paused (with a reason) or open, as the test says."""

    def __init__(self) -> None:
        self.reason: str | None = None

    async def __call__(self) -> str | None:
        return self.reason


def report(healthy: bool, uid: str = "uid-1") -> HealthReport:
    return HealthReport(
        key=proxy_key("crawl", "p1"),
        uid=uid,
        healthy=healthy,
        latency_millis=12 if healthy else None,
        checked_at=CHECKED,
        reason="ProbeSucceeded" if healthy else "ProbeTimeout",
        message="",
    )


def fleet_with_p1() -> Fleet:
    fleet = Fleet()
    fleet.put_proxy({"metadata": {"namespace": "crawl", "name": "p1", "uid": "uid-1"}})
    return fleet


async def settle() -> None:
    for _ in range(20):
        await asyncio.sleep(0)


@contextlib.asynccontextmanager
async def running(pump: HealthStatusPump) -> AsyncIterator[None]:
    task = asyncio.create_task(pump.run())
    try:
        await settle()
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def writer() -> FlakyWriter:
    return FlakyWriter()


async def advance(clock: ManualClock, seconds: float) -> None:
    clock.advance(seconds)
    await settle()


def test_the_backoff_doubles_from_one_second_to_a_minute() -> None:
    assert [retry_delay(n) for n in range(1, 9)] == [1, 2, 4, 8, 16, 32, 60, 60]


async def test_a_failed_write_is_retried_with_backoff_until_it_succeeds(
    clock: ManualClock, writer: FlakyWriter
) -> None:
    pump = HealthStatusPump(fleet_with_p1(), writer, clock=clock)
    writer.fail = 2
    async with running(pump):
        pump.offer(report(True))
        await settle()
        assert (writer.attempts, writer.written) == (1, [])
        await advance(clock, 0.9)
        assert writer.attempts == 1
        await advance(clock, 0.1)
        assert writer.attempts == 2, "retried after 1 s"
        await advance(clock, 1.9)
        assert writer.attempts == 2
        await advance(clock, 0.1)
        assert writer.attempts == 3, "retried 2 s after the second failure"
        assert writer.verdicts() == [ConditionStatus.TRUE]
        assert repr(pump) == (
            "<HealthStatusPump [queued: 0 | held: 0 | written: 1 | failed writes: 2]>"
        )
        await advance(clock, 600)
        assert writer.attempts == 3, "nothing left to retry"


async def test_a_newer_report_replaces_one_still_waiting_for_a_retry(
    clock: ManualClock, writer: FlakyWriter
) -> None:
    pump = HealthStatusPump(fleet_with_p1(), writer, clock=clock)
    writer.fail = 2
    async with running(pump):
        pump.offer(report(False))
        await settle()
        pump.offer(report(True))
        await settle()
        assert writer.attempts == 2
        assert "held: 1" in repr(pump)
        await advance(clock, 1)
        assert writer.verdicts() == [ConditionStatus.TRUE], "the unhealthy report is gone"
        await advance(clock, 600)
        assert writer.attempts == 3


async def test_a_retry_for_a_deleted_proxy_is_dropped(
    clock: ManualClock, writer: FlakyWriter
) -> None:
    fleet = fleet_with_p1()
    pump = HealthStatusPump(fleet, writer, clock=clock)
    writer.fail = 1
    async with running(pump):
        pump.offer(report(True))
        await settle()
        fleet.remove_proxy("crawl", "p1")
        await advance(clock, 600)
        assert (writer.attempts, writer.written) == (1, [])
        assert "held: 0" in repr(pump)


async def test_a_client_error_is_retried_too(clock: ManualClock) -> None:
    class Disconnecting(FlakyWriter):
        async def update(self, body: Mapping[str, Any], mutate: Mutation) -> ProxyStatus:
            if not self.attempts:
                self.attempts += 1
                raise TransportError("Server disconnected")
            return await super().update(body, mutate)

    disconnecting = Disconnecting()
    pump = HealthStatusPump(fleet_with_p1(), disconnecting, clock=clock)
    async with running(pump):
        pump.offer(report(True))
        await settle()
        await advance(clock, 1)
        assert disconnecting.verdicts() == [ConditionStatus.TRUE]


async def test_a_paused_operator_writes_nothing_then_the_newest_report(
    clock: ManualClock, writer: FlakyWriter
) -> None:
    gate = Gate()
    gate.reason = "leader has a higher priority (10 > 0) and sweeps"
    pump = HealthStatusPump(fleet_with_p1(), writer, gate=gate, clock=clock)
    async with running(pump):
        pump.offer(report(True))
        pump.offer(report(False))
        await settle()
        await advance(clock, 10 * PAUSED_RECHECK_SECONDS)
        assert writer.attempts == 0
        assert repr(pump).endswith("| paused]>")
        gate.reason = None
        await advance(clock, PAUSED_RECHECK_SECONDS)
        assert writer.verdicts() == [ConditionStatus.FALSE]
        assert writer.attempts == 1
