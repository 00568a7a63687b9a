"""The time seam: every component reads and waits on time only through a Clock.

`SystemClock` is the real one, built once by each composition root
(`operator/process.py`, `tier/app.py`) and handed to every component that reads
the time or waits; `ManualClock` is virtual time for tests. A Kubernetes
timestamp is written with `k8s_time` (or `k8s_micro_time`) and read with
`parse_k8s_time`, nowhere else: decisions compare timezone-aware datetimes.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import time
from datetime import UTC, datetime, timedelta
from typing import Protocol

# Kubernetes `Time` (RFC 3339, whole seconds, UTC) and `MicroTime` (microseconds).
_K8S_TIME = "%Y-%m-%dT%H:%M:%SZ"
_K8S_MICRO_TIME = "%Y-%m-%dT%H:%M:%S.%fZ"


def k8s_time(moment: datetime) -> str:
    """`moment` as a Kubernetes `Time`: UTC, the fraction of a second dropped."""
    return moment.astimezone(UTC).strftime(_K8S_TIME)


def k8s_micro_time(moment: datetime) -> str:
    """`moment` as a Kubernetes `MicroTime` (Events, stamps that must change every call)."""
    return moment.astimezone(UTC).strftime(_K8S_MICRO_TIME)


def parse_k8s_time(stamp: str) -> datetime:
    """A Kubernetes timestamp (`Time`, `MicroTime`, any RFC 3339 offset) as aware UTC.

    A stamp without an offset (kopf's peering `lastseen`) is read as UTC.
    Raises ValueError for text that is not a timestamp.
    """
    moment = datetime.fromisoformat(stamp)
    if moment.tzinfo is None:
        return moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC)


class Clock(Protocol):
    """Monotonic seconds for scheduling, UTC wall time for reports, and a way to wait."""

    def monotonic(self) -> float:
        """Seconds on a clock that never goes backwards."""
        ...

    def time(self) -> float:
        """Wall time as seconds since the epoch (what leases and metrics record)."""
        ...

    def utcnow(self) -> datetime:
        """The current wall time, timezone-aware UTC."""
        ...

    async def sleep(self, seconds: float) -> None:
        """Return after `seconds` of this clock's time."""
        ...


class SystemClock:
    """The machine's clocks: what the operator uses."""

    def __repr__(self) -> str:
        return "<SystemClock>"

    def monotonic(self) -> float:
        """`time.monotonic()`, which is also the event loop's clock."""
        return time.monotonic()

    def time(self) -> float:
        """`time.time()`."""
        return time.time()

    def utcnow(self) -> datetime:
        """`datetime.now(UTC)`."""
        return datetime.now(UTC)

    async def sleep(self, seconds: float) -> None:
        """`asyncio.sleep`."""
        await asyncio.sleep(seconds)


class ManualClock:
    """A clock that moves only when told to: runs components in virtual time (tests, e2e).

    `sleep()` returns once `advance()` has moved the clock past its deadline.
    """

    def __init__(
        self, start: float = 0.0, wall: datetime = datetime(2026, 1, 1, tzinfo=UTC)
    ) -> None:
        self._now = start
        self._wall_offset = wall - timedelta(seconds=start)
        self._epoch_offset = wall.timestamp() - start
        self._sleepers: list[tuple[float, int, asyncio.Future[None]]] = []
        self._order = itertools.count()

    def __repr__(self) -> str:
        return f"<ManualClock at {self._now:g} s | sleepers: {self.sleepers}>"

    @property
    def sleepers(self) -> int:
        """How many `sleep()` calls are waiting."""
        return sum(not future.done() for _, _, future in self._sleepers)

    @property
    def next_wake(self) -> float | None:
        """The virtual time the earliest waiting `sleep()` ends, None when none waits."""
        return min((due for due, _, future in self._sleepers if not future.done()), default=None)

    def monotonic(self) -> float:
        """The virtual time."""
        return self._now

    def time(self) -> float:
        """The wall time matching the virtual time, as epoch seconds."""
        return self._epoch_offset + self._now

    def utcnow(self) -> datetime:
        """The wall time matching the virtual time."""
        return self._wall_offset + timedelta(seconds=self._now)

    async def sleep(self, seconds: float) -> None:
        """Wait until the clock has been advanced by `seconds` (yield once if not positive)."""
        if seconds <= 0:
            await asyncio.sleep(0)
            return
        future = asyncio.get_running_loop().create_future()
        heapq.heappush(self._sleepers, (self._now + seconds, next(self._order), future))
        await future

    def advance(self, seconds: float) -> None:
        """Move the clock forward and wake every sleeper whose deadline has come."""
        self._now += seconds
        while self._sleepers and self._sleepers[0][0] <= self._now:
            _, _, future = heapq.heappop(self._sleepers)
            if not future.done():
                future.set_result(None)
