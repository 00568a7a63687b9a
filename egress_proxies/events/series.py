"""The pure core of the Event recorder: occurrences grouped into series, and when to write them.

Kubernetes aggregates a repeated event into one Event object with a
`series` (count and last observed time) instead of a new object each time;
this book does the same, per (object, reason): the first occurrence creates
the Event, later ones add to its series. It also bounds the writes: one
Event object is written at most once per `interval` seconds, and the
occurrences in between are counted and written together when it is due,
so the count stays exact while a flapping object costs at most one write
per reason per interval. A series written and quiet for `idle` seconds is
forgotten (its Event object stays; a later occurrence starts a new one).

An Event object is named as client-go's recorder names them, after its
object and the time of its first occurrence: `kubectl describe` orders
Events by `lastTimestamp`, whole seconds, and leaves Events of the same
second in the order the API server lists them, by name.

No I/O and no clock: the recorder passes the times in.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from typing import Any

from egress_proxies.clock import k8s_micro_time, k8s_time

SERIES_INTERVAL = 10.0  # seconds between two writes of one Event object
IDLE_SECONDS = 600.0  # a written series quiet this long is forgotten
MESSAGE_LIMIT = 1024  # the API server's limit on an Event's message


@dataclass(frozen=True)
class Regarding:
    """The object an Event is about (its involvedObject)."""

    api_version: str
    kind: str
    namespace: str
    name: str
    uid: str

    def reference(self) -> dict[str, str]:
        """The involvedObject field: what `kubectl describe` selects Events by."""
        return {
            "apiVersion": self.api_version,
            "kind": self.kind,
            "namespace": self.namespace,
            "name": self.name,
            "uid": self.uid,
        }


def event_name(regarding: Regarding, first: datetime.datetime) -> str:
    """An Event object's name: its object's, and the time of the first occurrence in hex ns."""
    nanoseconds = round(first.timestamp() * 1_000_000) * 1000
    return f"{regarding.name[:200]}.{nanoseconds:x}"


@dataclass
class Series:
    """The occurrences of one reason on one object, and how many its Event object shows."""

    regarding: Regarding
    reason: str
    type: str
    message: str
    first: datetime.datetime
    last: datetime.datetime
    count: int = 1
    written: int = 0  # occurrences the Event object shows; 0 before it is created
    due: float = 0.0  # monotonic seconds when it may be written next

    @property
    def name(self) -> str:
        """The Event object's name."""
        return event_name(self.regarding, self.first)

    @property
    def pending(self) -> bool:
        """Occurrences not written yet."""
        return self.count > self.written

    def document(self, count: int, component: str, instance: str) -> dict[str, Any]:
        """The whole Event object as first created, showing `count` occurrences."""
        event: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": self.name, "namespace": self.regarding.namespace},
            "involvedObject": self.regarding.reference(),
            "type": self.type,
            "reason": self.reason,
            "action": self.reason,
            "message": self.message,
            "eventTime": k8s_micro_time(self.first),
            "firstTimestamp": k8s_time(self.first),
            "source": {"component": component.rsplit("/", 1)[-1]},
            "reportingComponent": component,
            "reportingInstance": instance,
        }
        return {**event, **self.update(count)}

    def update(self, count: int) -> dict[str, Any]:
        """The fields a repeat changes (a merge patch): the series, the latest message and type.

        `count` and `lastTimestamp` repeat them for readers of the older Event fields.
        """
        series = (
            {"count": count, "lastObservedTime": k8s_micro_time(self.last)} if count > 1 else None
        )
        return {
            "type": self.type,
            "message": self.message,
            "series": series,
            "count": count,
            "lastTimestamp": k8s_time(self.last),
        }


class SeriesBook:
    """Series per (object UID, reason); which of them are due for a write."""

    def __init__(self, interval: float = SERIES_INTERVAL, idle: float = IDLE_SECONDS) -> None:
        self._interval = interval
        self._idle = idle
        self._series: dict[tuple[str, str], Series] = {}

    def __repr__(self) -> str:
        pending = sum(1 for series in self._series.values() if series.pending)
        return f"<SeriesBook [series: {len(self._series)} | pending: {pending}]>"

    def observe(
        self,
        regarding: Regarding,
        type_: str,
        reason: str,
        message: str,
        when: datetime.datetime,
    ) -> Series:
        """Count one occurrence; the latest message and type are the ones shown."""
        key = (regarding.uid, reason)
        series = self._series.get(key)
        message = message[:MESSAGE_LIMIT]
        if series is None:
            series = Series(regarding, reason, type_, message, first=when, last=when)
            self._series[key] = series
            return series
        series.count += 1
        series.last, series.type, series.message = when, type_, message
        return series

    def due(self, now: float) -> list[Series]:
        """The series with occurrences to write whose interval has passed, oldest first."""
        ready = [s for s in self._series.values() if s.pending and s.due <= now]
        return sorted(ready, key=lambda series: series.last)

    def next_due(self) -> float | None:
        """When the next pending series may be written; None when nothing is pending."""
        return min((s.due for s in self._series.values() if s.pending), default=None)

    def written(self, series: Series, count: int, now: float) -> None:
        """The Event object now shows `count` occurrences; the next write waits an interval."""
        series.written = count
        series.due = now + self._interval

    def postpone(self, series: Series, now: float) -> None:
        """A write failed: try again after an interval."""
        series.due = now + self._interval

    def expire(self, now: float) -> None:
        """Forget series written and quiet for `idle` seconds."""
        for key, series in list(self._series.items()):
            if not series.pending and series.due + self._idle <= now:
                del self._series[key]
