"""Health reports into status: the health engine owns the verdict, the status writer its display.

The engine hands each status-affecting report to a bounded queue without
blocking (a full queue makes the engine retry with its next probe); one
task drains the queue into the status writer. The engine reports only
changes, so a report is never dropped for a failed write: it is retried
with backoff (1 s, doubling up to 60 s) until it is written or a newer
report about the same Proxy replaces it. While kopf peering pauses this
operator (the gate says why), nothing is written: the newest report per
Proxy is held and written once the gate opens.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from egress_proxies.catalog import ProxyKey
from egress_proxies.catalog.fleet import Fleet
from egress_proxies.clock import Clock, SystemClock, k8s_time
from egress_proxies.health.policy import HealthReport
from egress_proxies.kube import KubeApiError
from egress_proxies.model import HEALTHY, ConditionStatus, ProxyStatus
from egress_proxies.proxies.reconcile import set_condition
from egress_proxies.proxies.standby import Gate, never_paused
from egress_proxies.proxies.status import Mutation

logger = logging.getLogger(__name__)

QUEUE_SIZE = 64
FIRST_RETRY_SECONDS = 1.0
MAX_RETRY_SECONDS = 60.0
PAUSED_RECHECK_SECONDS = 2.0


class HealthWriter(Protocol):
    """Where health goes: the operator's one status writer."""

    async def update(self, body: Mapping[str, Any], mutate: Mutation) -> ProxyStatus:
        """Apply `mutate` to the Proxy's status and patch what changed."""
        ...


def retry_delay(failures: int) -> float:
    """Seconds to wait after `failures` failed writes in a row: 1, 2, 4 ... capped at 60."""
    return float(min(FIRST_RETRY_SECONDS * 2 ** (failures - 1), MAX_RETRY_SECONDS))


def apply_health(status: ProxyStatus, report: HealthReport) -> ProxyStatus:
    """The Healthy condition, latencyMillis and lastHealthCheckTime from one report."""
    checked = k8s_time(report.checked_at)
    conditions = set_condition(
        status.conditions,
        HEALTHY,
        ConditionStatus.TRUE if report.healthy else ConditionStatus.FALSE,
        reason=report.reason,
        message=report.message,
        now=checked,
    )
    return status.model_copy(
        update={
            "conditions": conditions,
            "latency_millis": report.latency_millis,
            "last_health_check_time": checked,
        }
    )


@dataclass
class _Held:
    """A report not written yet, and when to try."""

    report: HealthReport
    due: float
    failures: int = 0


class HealthStatusPump:
    """A bounded queue between the health engine and the status writer, with retries."""

    def __init__(
        self,
        fleet: Fleet,
        writer: HealthWriter,
        *,
        gate: Gate = never_paused,
        clock: Clock | None = None,
    ) -> None:
        self._fleet = fleet
        self._writer = writer
        self._gate = gate
        self._clock = clock or SystemClock()
        self._queue: asyncio.Queue[HealthReport] = asyncio.Queue(QUEUE_SIZE)
        self._held: dict[ProxyKey, _Held] = {}
        self._paused: str | None = None
        self.written = 0
        self.failures = 0

    def __repr__(self) -> str:
        paused = " | paused" if self._paused else ""
        return (
            f"<HealthStatusPump [queued: {self._queue.qsize()} | held: {len(self._held)} | "
            f"written: {self.written} | failed writes: {self.failures}{paused}]>"
        )

    def offer(self, report: HealthReport) -> None:
        """The engine's sink: never blocks, raises asyncio.QueueFull when saturated."""
        self._queue.put_nowait(report)

    async def run(self) -> None:
        """Write reports until cancelled; a newer report about a Proxy replaces a held one."""
        while True:
            report = await self._next_report()
            if report is not None:
                self._held[report.key] = _Held(report, due=self._clock.monotonic())
            await self._write_due()

    async def _next_report(self) -> HealthReport | None:
        """The engine's next report, or None when a held one is due first."""
        if not self._queue.empty() or not self._held:
            return await self._queue.get()
        wait = min(held.due for held in self._held.values()) - self._clock.monotonic()
        if wait <= 0:
            return None
        getter = asyncio.ensure_future(self._queue.get())
        sleeper = asyncio.ensure_future(self._clock.sleep(wait))
        try:
            await asyncio.wait((getter, sleeper), return_when=asyncio.FIRST_COMPLETED)
        finally:
            # A cancelled get leaves its item in the queue.
            getter.cancel()
            sleeper.cancel()
        return getter.result() if getter.done() and not getter.cancelled() else None

    async def _write_due(self) -> None:
        now = self._clock.monotonic()
        due = sorted((held for held in self._held.values() if held.due <= now), key=lambda h: h.due)
        if not due:
            return
        reason = await self._gate()
        if reason:
            if reason != self._paused:
                logger.info("health status writes held: %s", reason)
            self._paused = reason
            for held in due:
                held.due = now + PAUSED_RECHECK_SECONDS
            return
        if self._paused:
            logger.info("health status writes resumed")
            self._paused = None
        for held in due:
            try:
                await self._write(held.report)
            except (KubeApiError, OSError) as error:  # TransportError is an OSError
                self.failures += 1
                held.failures += 1
                delay = retry_delay(held.failures)
                held.due = self._clock.monotonic() + delay
                logger.warning(
                    "health status of %s not written (retrying in %gs): %s",
                    held.report.key,
                    delay,
                    error,
                )
                continue
            del self._held[held.report.key]

    async def _write(self, report: HealthReport) -> None:
        namespace, name = report.key.split("/", 1)
        body = self._fleet.proxy(namespace, name)
        if body is None or body["metadata"]["uid"] != report.uid:
            return  # the Proxy is gone or was recreated: the report is stale
        if body["metadata"].get("deletionTimestamp"):
            return
        await self._writer.update(body, lambda status: apply_health(status, report))
        self.written += 1
