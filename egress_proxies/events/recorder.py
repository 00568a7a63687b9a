"""The Event recorder: posts aggregated, rate-bounded Events about the operator's objects.

`record` never blocks and never fails: it counts an occurrence in the
`SeriesBook`, and the `run` task writes what is due, one request at a time
(core/v1 Events with `eventTime`, `series` and `reportingComponent`, the
shape `kubectl describe` and `kubectl get events` read). An Event object
deleted by the API server's event TTL is created again. A failed write is
retried an interval later; Events are a record for people, so nothing else
waits on them.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Protocol

from egress_proxies.clock import Clock
from egress_proxies.events.series import SERIES_INTERVAL, Regarding, Series, SeriesBook
from egress_proxies.kube import ConflictError, KubeApiError, NotFoundError
from egress_proxies.kube.resources import EVENTS

logger = logging.getLogger(__name__)

JsonObject = dict[str, Any]


class EventApi(Protocol):
    """The API calls the recorder makes."""

    async def create(self, path: str, body: JsonObject) -> JsonObject:
        """Create `body` in the collection at `path`."""
        ...

    async def patch(self, path: str, body: JsonObject, *, strategic: bool = False) -> JsonObject:
        """Merge-patch the object at `path`."""
        ...


class EventSink(Protocol):
    """Where components report what happened to an object."""

    def record(self, regarding: Regarding, type_: str, reason: str, message: str) -> None:
        """One occurrence of `reason` on `regarding` (type Normal or Warning)."""
        ...


class EventRecorder:
    """Aggregates occurrences into one Event object per (object, reason) and writes them."""

    def __init__(
        self,
        client: EventApi,
        clock: Clock,
        *,
        component: str,
        instance: str,
        interval: float = SERIES_INTERVAL,
    ) -> None:
        self._client = client
        self._clock = clock
        self._component = component
        self._instance = instance[:128]
        self._book = SeriesBook(interval)
        self._wake = asyncio.Event()
        self.created = 0
        self.patched = 0
        self.failed = 0

    def __repr__(self) -> str:
        return (
            f"<EventRecorder {self._book!r} [created: {self.created} | patched: {self.patched}"
            f" | failed: {self.failed}]>"
        )

    def record(self, regarding: Regarding, type_: str, reason: str, message: str) -> None:
        """Count one occurrence; it is written by `run` when its Event object is due."""
        self._book.observe(regarding, type_, reason, message, self._clock.utcnow())
        self._wake.set()

    async def run(self) -> None:
        """Write due series until cancelled."""
        while True:
            self._wake.clear()
            await self.flush()
            await self._wait()

    async def flush(self) -> None:
        """Write every series that is due now."""
        now = self._clock.monotonic()
        for series in self._book.due(now):
            await self._write(series, now)
        self._book.expire(now)

    async def _wait(self) -> None:
        next_due = self._book.next_due()
        if self._wake.is_set():
            return
        waker = asyncio.ensure_future(self._wake.wait())
        if next_due is None:
            await waker
            return
        sleeper = asyncio.ensure_future(self._clock.sleep(next_due - self._clock.monotonic()))
        try:
            await asyncio.wait((waker, sleeper), return_when=asyncio.FIRST_COMPLETED)
        finally:
            waker.cancel()
            sleeper.cancel()

    async def _write(self, series: Series, now: float) -> None:
        events = EVENTS.path(series.regarding.namespace)
        try:
            if series.written:
                count = await self._patch_or_create(events, series)
            else:
                count = await self._create(events, series)
        except (KubeApiError, OSError) as error:  # TransportError is an OSError
            self.failed += 1
            self._book.postpone(series, now)
            logger.warning(
                "event %s on %s/%s not written (retrying): %s",
                series.reason,
                series.regarding.namespace,
                series.regarding.name,
                error,
            )
            return
        self._book.written(series, count, now)

    async def _create(self, events: str, series: Series) -> int:
        """Create the Event; the count written (occurrences recorded meanwhile stay pending).

        A conflict means an earlier try did create it (its answer was lost): update it.
        """
        count = series.count
        try:
            await self._client.create(
                events, series.document(count, self._component, self._instance)
            )
        except ConflictError:
            await self._client.patch(f"{events}/{series.name}", series.update(count))
            self.patched += 1
            return count
        self.created += 1
        return count

    async def _patch_or_create(self, events: str, series: Series) -> int:
        """Update the series; create the Event again if the event TTL removed it."""
        count = series.count
        try:
            await self._client.patch(f"{events}/{series.name}", series.update(count))
        except NotFoundError:
            await self._client.create(
                events, series.document(count, self._component, self._instance)
            )
            self.created += 1
            return count
        self.patched += 1
        return count
