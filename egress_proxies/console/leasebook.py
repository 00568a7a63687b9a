"""What the console knows of leases: the ones this process granted and what crawlers reported.

The lease store answers the discovery API; the console reads it through what
the API already learns from it (observed_store.py): every grant, renewal,
release and report passes through this book. From them it keeps the live
leases, the pace last handed out per {proxy, target}, when each target's pace
was last lowered, the share of rate-limited and banned reports over the last
hour and the bans per proxy over the last day. Cooldowns are not copied here:
the console reads them from the store (`LeaseStore.cooldowns`), which is where
a console user clears one.

Everything here is bounded: leases by `MAX_LEASES`, targets by `MAX_TARGETS`
(the longest unseen is dropped first), each series by its window.
"""

from __future__ import annotations

import collections
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol

from egress_proxies.catalog import ProxyKey
from egress_proxies.clock import Clock
from egress_proxies.leases import Lease, LeaseId, ReportOutcome, ReportResult

MAX_LEASES = 100_000
MAX_TARGETS = 2_000
MAX_RATE_LIMIT_MARKS = 500  # per target: the marks on its pace chart
MAX_BANS_PER_PROXY = 1_000
REPORT_WINDOW = 3600.0  # the share of rate limits and bans is over this long
BAN_WINDOW = 24 * 3600.0
PACE_FRESH = 600.0  # a proxy's pace for a target counts in the fleet's sum this long
_MINUTE = 60.0


@dataclass(frozen=True, slots=True)
class LiveLease:
    """One lease this process granted and that has not ended."""

    lease_id: LeaseId
    proxy: ProxyKey
    target: str | None
    granted_at: float
    expires_at: float
    holder: str | None  # the name of the crawler token it was granted to, if known


@dataclass(slots=True)
class TargetBook:
    """What is known of one target (a site)."""

    paces: dict[ProxyKey, tuple[float, float]] = field(default_factory=dict)  # rate, seen at
    lowered_at: float | None = None
    waiting_held: int | None = None
    # One row per minute with reports: [minute start, ok, rate_limited, banned].
    minutes: collections.deque[list[float]] = field(
        default_factory=lambda: collections.deque(maxlen=int(REPORT_WINDOW // _MINUTE))
    )
    rate_limits: collections.deque[float] = field(
        default_factory=lambda: collections.deque(maxlen=MAX_RATE_LIMIT_MARKS)
    )
    seen_at: float = 0.0

    def fleet_pace(self, now: float) -> float:
        """The fleet's pages per second for this target: the sum of the fresh paces."""
        return sum(rate for rate, seen in self.paces.values() if now - seen <= PACE_FRESH)

    def report_counts(self, now: float) -> tuple[int, int, int]:
        """Reports over the last hour: ok (requests counted), rate limited, banned."""
        ok = limited = banned = 0.0
        for start, *counts in self.minutes:
            if now - start <= REPORT_WINDOW:
                ok, limited, banned = ok + counts[0], limited + counts[1], banned + counts[2]
        return int(ok), int(limited), int(banned)


class LeaseFacts(Protocol):
    """What the views read of leases: this process's LeaseBook, or every replica's
    (tally.py's RedisTally)."""

    def leases(self) -> list[LiveLease]:
        """The live leases, oldest first."""
        ...

    def targets(self) -> Mapping[str, TargetBook]:
        """Every target seen, by name."""
        ...

    def bans_last_day(self, key: ProxyKey) -> int:
        """How often the proxy was reported banned in the last 24 hours."""
        ...


class LeaseBook:
    """The leases, paces and reports the console shows (see the module)."""

    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self._leases: dict[LeaseId, LiveLease] = {}
        self._targets: dict[str, TargetBook] = {}
        self._bans: dict[ProxyKey, collections.deque[float]] = {}

    def __repr__(self) -> str:
        return (
            f"<LeaseBook [leases: {len(self._leases)} | targets: {len(self._targets)} | "
            f"proxies banned: {len(self._bans)}]>"
        )

    def granted(self, lease: Lease, holder: str | None = None) -> None:
        """A lease was granted (or renewed) to `holder` (a token's name): it runs until
        `lease.expires_at`; a renewal keeps the holder the grant named."""
        now = self._clock.time()
        known = self._leases.pop(lease.lease_id, None)
        if known is None and len(self._leases) >= MAX_LEASES:
            del self._leases[next(iter(self._leases))]
        self._leases[lease.lease_id] = LiveLease(
            lease.lease_id,
            lease.proxy.key,
            lease.target,
            known.granted_at if known else now,
            lease.expires_at,
            known.holder if known else holder,
        )
        if lease.target is not None:
            book = self._target(lease.target, now)
            if lease.pace is not None:
                book.paces[lease.proxy.key] = (lease.pace.rate, now)
                book.waiting_held = lease.pace.waiting_held

    def released(self, lease_id: LeaseId) -> None:
        """A lease ended on request."""
        self._leases.pop(lease_id, None)

    def reported(
        self,
        outcome: ReportOutcome,
        result: ReportResult,
        count: int,
    ) -> None:
        """A report was accepted; `outcome` carries the pace after it."""
        now = self._clock.time()
        key = outcome.lease.proxy.key
        if result is ReportResult.BANNED:
            bans = self._bans.setdefault(key, collections.deque(maxlen=MAX_BANS_PER_PROXY))
            bans.append(now)
        if outcome.target is None:
            return
        book = self._target(outcome.target, now)
        minute = now - now % _MINUTE
        if not book.minutes or book.minutes[-1][0] != minute:
            book.minutes.append([minute, 0, 0, 0])
        column = {ReportResult.OK: 1, ReportResult.RATE_LIMITED: 2, ReportResult.BANNED: 3}
        book.minutes[-1][column[result]] += count if result is ReportResult.OK else 1
        if result is ReportResult.RATE_LIMITED:
            book.rate_limits.append(now)
        pace = outcome.pace
        if pace is not None:
            book.paces[key] = (pace.rate, now)
            book.waiting_held = pace.waiting_held
            if pace.lowered_at is not None:
                book.lowered_at = max(book.lowered_at or 0.0, pace.lowered_at)

    def forgot(self, key: ProxyKey) -> None:
        """A proxy is gone: its leases, paces and bans go with it."""
        for lease_id in [i for i, lease in self._leases.items() if lease.proxy == key]:
            del self._leases[lease_id]
        self._bans.pop(key, None)
        for book in self._targets.values():
            book.paces.pop(key, None)

    def leases(self) -> list[LiveLease]:
        """The live leases, oldest first (ended ones are dropped here)."""
        now = self._clock.time()
        for lease_id in [i for i, lease in self._leases.items() if lease.expires_at <= now]:
            del self._leases[lease_id]
        return sorted(self._leases.values(), key=lambda lease: lease.granted_at)

    def targets(self) -> dict[str, TargetBook]:
        """Every target seen, by name."""
        return self._targets

    def bans_last_day(self, key: ProxyKey) -> int:
        """How often the proxy was reported banned in the last 24 hours."""
        bans = self._bans.get(key)
        if not bans:
            return 0
        since = self._clock.time() - BAN_WINDOW
        while bans and bans[0] < since:
            bans.popleft()
        return len(bans)

    def _target(self, target: str, now: float) -> TargetBook:
        book = self._targets.get(target)
        if book is None:
            if len(self._targets) >= MAX_TARGETS:
                oldest = min(self._targets, key=lambda name: self._targets[name].seen_at)
                del self._targets[oldest]
            book = self._targets[target] = TargetBook()
        book.seen_at = now
        return book
