"""Health reports into status: the health engine owns the verdict, the status writer its display.

The engine hands each status-affecting report to a bounded queue without
blocking (a full queue makes the engine retry with its next probe); one
task drains the queue into the status writer.
"""

from __future__ import annotations

import asyncio
import logging

from egress_proxies.health.policy import HealthReport
from egress_proxies.kube import ApiError
from egress_proxies.model import HEALTHY, ConditionStatus, ProxyStatus
from egress_proxies.operator.fleet import Fleet
from egress_proxies.operator.reconcile import set_condition
from egress_proxies.operator.status import StatusWriter

logger = logging.getLogger(__name__)

QUEUE_SIZE = 64


def apply_health(status: ProxyStatus, report: HealthReport) -> ProxyStatus:
    """The Healthy condition, latencyMillis and lastHealthCheckTime from one report."""
    checked = report.checked_at.strftime("%Y-%m-%dT%H:%M:%SZ")
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


class HealthStatusPump:
    """A bounded queue between the health engine and the status writer."""

    def __init__(self, fleet: Fleet, writer: StatusWriter) -> None:
        self._fleet = fleet
        self._writer = writer
        self._queue: asyncio.Queue[HealthReport] = asyncio.Queue(QUEUE_SIZE)
        self.written = 0

    def __repr__(self) -> str:
        return f"<HealthStatusPump [queued: {self._queue.qsize()} | written: {self.written}]>"

    def offer(self, report: HealthReport) -> None:
        """The engine's sink: never blocks, raises asyncio.QueueFull when saturated."""
        self._queue.put_nowait(report)

    async def run(self) -> None:
        """Write reports until cancelled."""
        while True:
            report = await self._queue.get()
            try:
                await self._write(report)
            except (ApiError, OSError) as error:
                logger.warning("health status of %s not written: %s", report.key, error)

    async def _write(self, report: HealthReport) -> None:
        namespace, name = report.key.split("/", 1)
        body = self._fleet.proxy(namespace, name)
        if body is None or body["metadata"]["uid"] != report.uid:
            return  # the Proxy is gone or was recreated: the report is stale
        if body["metadata"].get("deletionTimestamp"):
            return
        await self._writer.update(body, lambda status: apply_health(status, report))
        self.written += 1
