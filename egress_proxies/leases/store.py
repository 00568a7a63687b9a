"""The in-memory lease store: who holds which proxy until when, behind one lock.

Time comes from an injected clock (seconds; `time.time` by default) and every
operation first ends what the clock says is over, so a TTL is honoured on every
read without a background sweeper: expiry deadlines sit in a heap and each
operation pops the due ones, amortised O(log n). Ended leases are remembered for
one cooldown window so that a late report still lands.
"""

from __future__ import annotations

import heapq
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from itertools import compress
from operator import not_

from egress_proxies.catalog import ProxyKey, ProxyRecord
from egress_proxies.errors import EgressProxiesError
from egress_proxies.leases.banstorm import BanStorms
from egress_proxies.leases.candidates import CandidatePool
from egress_proxies.leases.cooldowns import Cooldowns
from egress_proxies.leases.lease import (
    Lease,
    LeaseId,
    NoMatch,
    ReportOutcome,
    ReportResult,
    new_lease_id,
)

Clock = Callable[[], float]

DEFAULT_COOLDOWN_WINDOW = 300.0
DEFAULT_MAX_TTL = 3600
DEFAULT_BAN_BACKOFF_CAP = 6 * 3600.0
# Rate limits clear in seconds, not minutes: see docs/api.md, "Rate limits are not bans".
DEFAULT_RATE_LIMIT_WINDOW = 30.0


class InvalidTtlError(ValueError, EgressProxiesError):
    """A TTL outside 1..max_ttl seconds: refused, never clamped."""


class LeaseStore:
    """Leases and cooldowns for the whole fleet (one process; lost on restart).

    Selection among a pool's offerable proxies: fewest active leases, then
    latency, then key. A proxy at its `max_leases` or cooling for the target is
    skipped. Acquiring walks the pool's ranked proxies and stops at the first
    idle one, so its cost grows with the busy or cooling proxies ranked ahead of
    the winner, not with the size of the fleet; busy ones are skipped without a
    Python step each, since an idle proxy, when there is one, always wins.
    """

    def __init__(
        self,
        *,
        clock: Clock = time.time,
        cooldown_window: float = DEFAULT_COOLDOWN_WINDOW,
        max_ttl: int = DEFAULT_MAX_TTL,
        ban_backoff_cap: float = DEFAULT_BAN_BACKOFF_CAP,
        rate_limit_window: float = DEFAULT_RATE_LIMIT_WINDOW,
        ban_storms: BanStorms | None = None,
    ) -> None:
        if cooldown_window <= 0 or max_ttl < 1 or rate_limit_window <= 0:
            raise ValueError("cooldown_window, rate_limit_window and max_ttl must be positive")
        if ban_backoff_cap < cooldown_window:
            raise ValueError("ban_backoff_cap must be at least cooldown_window")
        self._clock = clock
        self._cooldown_window = cooldown_window
        self._max_ttl = max_ttl
        self._lock = threading.Lock()
        self._cooldowns = Cooldowns(cooldown_window, ban_backoff_cap, rate_limit_window)
        self._storms = ban_storms if ban_storms is not None else BanStorms()
        self._active: dict[LeaseId, Lease] = {}
        self._holders: dict[ProxyKey, dict[LeaseId, Lease]] = {}
        self._expiry_queue: list[tuple[float, LeaseId]] = []
        self._ended: dict[LeaseId, Lease] = {}
        self._ended_queue: list[tuple[float, LeaseId]] = []

    @property
    def max_ttl(self) -> int:
        """The longest lease, in seconds, a client may ask for."""
        return self._max_ttl

    def acquire(self, pool: CandidatePool, target: str | None, ttl_seconds: int) -> Lease | NoMatch:
        """Lease the best free proxy of the pool for `target`, or say why none is free."""
        self._check_ttl(ttl_seconds)
        with self._lock:
            now = self._clock()
            self._end_due(now)
            paused_until = None if target is None else self._storms.paused_until(target, now)
            winner = None if paused_until is not None else self._first_idle(pool, target, now)
            if winner is None:
                outcome = self._least_loaded(pool, target, now, paused_until)
                if isinstance(outcome, NoMatch):
                    return outcome
                winner = outcome
            lease = Lease(
                new_lease_id(),
                winner,
                target,
                ttl_seconds,
                now + ttl_seconds,
                pool_keys=pool.keys,
                pool_size=pool.considered,
            )
            self._active[lease.lease_id] = lease
            self._holders.setdefault(winner.key, {})[lease.lease_id] = lease
            heapq.heappush(self._expiry_queue, (lease.expires_at, lease.lease_id))
            return lease

    def _first_idle(
        self, pool: CandidatePool, target: str | None, now: float
    ) -> ProxyRecord | None:
        """The best-ranked proxy nobody holds and not cooling for the target, if any.

        Whenever one exists it is the winner (no proxy has fewer than no leases),
        so the busy proxies ranked ahead of it are skipped at C speed, uncounted.
        """
        is_held = self._holders.__contains__
        for record in compress(pool.ranked, map(not_, map(is_held, pool.ranked_keys))):
            if not self._cooldowns.is_cooling(record.key, target, now):
                return record
        return None

    def _least_loaded(
        self, pool: CandidatePool, target: str | None, now: float, paused_until: float | None
    ) -> ProxyRecord | NoMatch:
        """The full walk: the free proxy with the fewest leases, or why none is free."""
        holders, cooldowns = self._holders, self._cooldowns
        winner, winner_count = None, 0
        at_capacity = in_cooldown = 0
        for record in pool.ranked:
            count = len(holders.get(record.key, ()))
            if count >= record.max_leases:
                at_capacity += 1
            elif paused_until is not None or cooldowns.is_cooling(record.key, target, now):
                in_cooldown += 1
            elif winner is None or count < winner_count:
                winner, winner_count = record, count
                if count == 0:
                    break
        if winner is None:
            free_at = self._earliest_free(pool, target, now)
            if paused_until is not None:
                free_at = max(paused_until, free_at or paused_until)
            return NoMatch(
                considered=pool.considered,
                at_capacity=at_capacity,
                in_cooldown=in_cooldown,
                unhealthy=pool.not_offerable,
                retry_after=None if free_at is None else free_at - now,
                target_paused=paused_until is not None,
            )
        return winner

    def renew(self, lease_id: LeaseId, ttl_seconds: int) -> Lease | None:
        """Extend an active lease to end `ttl_seconds` from now; None once it has ended."""
        self._check_ttl(ttl_seconds)
        with self._lock:
            now = self._clock()
            self._end_due(now)
            lease = self._active.get(lease_id)
            if lease is None:
                return None
            renewed = replace(lease, ttl_seconds=ttl_seconds, expires_at=now + ttl_seconds)
            self._active[lease_id] = renewed
            self._holders[lease.proxy.key][lease_id] = renewed
            heapq.heappush(self._expiry_queue, (renewed.expires_at, lease_id))
            self._compact_expiry_queue()
            return renewed

    def release(self, lease_id: LeaseId) -> None:
        """End a lease now. Unknown, expired and already released ids are fine (idempotent)."""
        with self._lock:
            now = self._clock()
            self._end_due(now)
            lease = self._active.get(lease_id)
            if lease is not None:
                self._end(lease, now)
                self._compact_expiry_queue()

    def report(
        self,
        lease_id: LeaseId,
        result: ReportResult,
        target: str | None,
        retry_after: float | None = None,
    ) -> ReportOutcome | None:
        """Record what the holder saw; None when the lease is unknown.

        A lease is known while active and for one cooldown window after it ends.
        The cooldown's target is the report's, else the lease's, else global.
        `retry_after` (the site's Retry-After on a rate limit) sets that cooldown.
        """
        with self._lock:
            now = self._clock()
            self._end_due(now)
            lease = self._active.get(lease_id) or self._ended.get(lease_id)
            if lease is None:
                return None
            resolved = target if target is not None else lease.target
            key = lease.proxy.key
            self._cooldowns.record((key, resolved), result, now, retry_after)
            paused_until = None
            if result is ReportResult.BANNED and resolved is not None:
                self._storms.prune(now)
                paused_until = self._storms.record_ban(
                    resolved, key, lease.pool_keys, lease.pool_size, now
                )
            return ReportOutcome(lease, resolved, paused_until)

    def forget_proxy(self, key: ProxyKey) -> None:
        """The proxy is gone: end its leases (late reports included) and drop its cooldowns."""
        with self._lock:
            for lease_id in self._holders.pop(key, {}):
                del self._active[lease_id]
            for lease_id in [i for i, lease in self._ended.items() if lease.proxy.key == key]:
                del self._ended[lease_id]
            self._cooldowns.forget_proxy(key)
            self._compact_expiry_queue()

    def active_counts(self) -> dict[ProxyKey, int]:
        """Active leases per proxy, for proxies holding at least one."""
        with self._lock:
            self._end_due(self._clock())
            return {key: len(leases) for key, leases in self._holders.items()}

    def active_lease_count(self) -> int:
        """Leases active right now."""
        with self._lock:
            self._end_due(self._clock())
            return len(self._active)

    def active_cooldown_count(self) -> int:
        """{proxy, target} pairs cooling right now."""
        with self._lock:
            now = self._clock()
            self._end_due(now)
            return self._cooldowns.active_count(now)

    def paused_target_count(self) -> int:
        """Targets paused by the ban-storm guard right now."""
        with self._lock:
            return self._storms.paused_count(self._clock())

    def __repr__(self) -> str:
        with self._lock:
            now = self._clock()
            self._end_due(now)
            leases, cooldowns = len(self._active), self._cooldowns.active_count(now)
            paused = self._storms.paused_count(now)
        return (
            f"<LeaseStore [leases: {leases} active | cooldowns: {cooldowns} | "
            f"paused targets: {paused}]>"
        )

    def _end_due(self, now: float) -> None:
        queue = self._expiry_queue
        while queue and queue[0][0] <= now:
            expires_at, lease_id = heapq.heappop(queue)
            lease = self._active.get(lease_id)
            if lease is not None and lease.expires_at == expires_at:
                self._end(lease, expires_at)
        ended = self._ended_queue
        while ended and ended[0][0] <= now:
            _, lease_id = heapq.heappop(ended)
            self._ended.pop(lease_id, None)
        self._cooldowns.prune(now)

    def _end(self, lease: Lease, ended_at: float) -> None:
        del self._active[lease.lease_id]
        key = lease.proxy.key
        holders = self._holders[key]
        del holders[lease.lease_id]
        if not holders:
            del self._holders[key]
        self._ended[lease.lease_id] = lease
        heapq.heappush(self._ended_queue, (ended_at + self._cooldown_window, lease.lease_id))

    def _check_ttl(self, ttl_seconds: int) -> None:
        if not 1 <= ttl_seconds <= self._max_ttl:
            raise InvalidTtlError(f"ttl must be between 1 and {self._max_ttl} seconds")

    def _earliest_free(self, pool: CandidatePool, target: str | None, now: float) -> float | None:
        """When the first of the pool's offerable proxies may be free for the target."""
        earliest = None
        for record in pool.ranked:
            free_at = self._free_at(record, target, now)
            if earliest is None or free_at < earliest:
                earliest = free_at
        return earliest

    def _free_at(self, record: ProxyRecord, target: str | None, now: float) -> float:
        holders = self._holders.get(record.key, {})
        free_at = now
        if len(holders) >= record.max_leases:
            free_at = min(lease.expires_at for lease in holders.values())
        cooling_until = self._cooldowns.cooling_until(record.key, target, now)
        return free_at if cooling_until is None else max(free_at, cooling_until)

    def _compact_expiry_queue(self) -> None:
        # Released leases leave their deadline behind; rebuild once stale entries dominate.
        if len(self._expiry_queue) > 2 * len(self._active) + 1024:
            self._expiry_queue = [(lease.expires_at, i) for i, lease in self._active.items()]
            heapq.heapify(self._expiry_queue)
