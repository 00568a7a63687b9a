"""The Events this process posted, kept for the console, then passed on to the real sink.

The pools' scaling, rotation and drain decisions (with their reasons) and the
console's own actions are Events; the console shows the last few per object
without asking the API server for them.
"""

from __future__ import annotations

import collections
from dataclasses import dataclass

from egress_proxies.clock import Clock
from egress_proxies.events import EventSink, Regarding

MAX_PER_OBJECT = 20
MAX_OBJECTS = 5_000


@dataclass(frozen=True, slots=True)
class LoggedEvent:
    """One Event as posted: when, its type (Normal, Warning), reason and message."""

    at: float
    type: str
    reason: str
    message: str


ObjectKey = tuple[str, str, str]  # (kind, namespace, name)


class EventLog:
    """An EventSink that remembers the last MAX_PER_OBJECT Events of each object."""

    def __init__(self, sink: EventSink, clock: Clock) -> None:
        self._sink = sink
        self._clock = clock
        self._events: dict[ObjectKey, collections.deque[LoggedEvent]] = {}

    def __repr__(self) -> str:
        return f"<EventLog [objects: {len(self._events)}]>"

    def record(self, regarding: Regarding, type_: str, reason: str, message: str) -> None:
        """Remember the occurrence, then hand it to the real sink."""
        key = (regarding.kind, regarding.namespace, regarding.name)
        events = self._events.pop(key, None)
        if events is None:
            if len(self._events) >= MAX_OBJECTS:
                del self._events[next(iter(self._events))]
            events = collections.deque(maxlen=MAX_PER_OBJECT)
        self._events[key] = events  # most recently used last
        events.append(LoggedEvent(self._clock.time(), type_, reason, message))
        self._sink.record(regarding, type_, reason, message)

    def of(self, kind: str, namespace: str, name: str) -> list[LoggedEvent]:
        """The object's remembered Events, newest first."""
        return list(reversed(self._events.get((kind, namespace, name), ())))
