"""The in-memory lease store: who holds which proxy until when, in one process.

Time comes from an injected clock (`Clock.time()`, wall seconds) and every
operation first ends what the clock says is over, so a TTL is honoured on every
read without a background sweeper: expiry deadlines sit in a heap and each
operation pops the due ones, amortised O(log n). Ended leases are remembered for
one cooldown window so that a late report still lands (`EndedLeases`). The
methods are coroutines only to satisfy the LeaseStore Protocol: none awaits
anything, so an operation is atomic on the event loop; the lock guards the
scrape thread.
"""

from __future__ import annotations

import heapq
import sys
import threading
from collections.abc import Iterable
from dataclasses import replace
from itertools import compress
from operator import not_

from egress_proxies.catalog import ProxyKey, ProxyRecord
from egress_proxies.clock import Clock, SystemClock
from egress_proxies.leases.banstorm import BanStorms
from egress_proxies.leases.candidates import CandidatePool
from egress_proxies.leases.capacity import is_full_for
from egress_proxies.leases.cooldowns import Cooldowns
from egress_proxies.leases.ended import EndedLeases
from egress_proxies.leases.lease import (
    Lease,
    LeaseId,
    NoMatch,
    ReportOutcome,
    ReportResult,
    new_lease_id,
)
from egress_proxies.leases.limits import LeaseLimits
from egress_proxies.leases.pace import Pace, Paces, handed_out
from egress_proxies.leases.store import (
    MAX_COOLDOWNS_LISTED,
    Cooling,
    InvalidTtlError,
    LeaseCounts,
    LeaseEnds,
    RecordLookup,
)
from egress_proxies.leases.waiting import Waiting, contended_retry

# A proxy's revocations nobody asks for are pruned when they reach a power of two
# from this on (the proxy's own requests prune them too).
_PRUNE_AFTER = 64


class MemoryLeaseStore:
    """Leases and cooldowns for the whole fleet in this process (lost on restart).

    Acquiring walks the pool's ranked proxies and stops at the first idle one, so
    its cost grows with the busy or cooling proxies ranked ahead of the winner,
    not with the size of the fleet; busy ones are skipped without a Python step
    each, since an idle proxy, when there is one, always wins. Capacity is per
    {proxy, target} pair (leases/capacity.py): among proxies with room for the
    target, the fewest leases for it, then the fewest in all, win.
    """

    def __init__(self, limits: LeaseLimits | None = None, *, clock: Clock | None = None) -> None:
        limits = limits or LeaseLimits()
        self._clock = clock or SystemClock()
        self._max_ttl = limits.max_ttl
        self._lock = threading.Lock()
        self._cooldowns = Cooldowns(
            limits.cooldown_window, limits.ban_backoff_cap, limits.rate_limit_window
        )
        self._storms = BanStorms(limits.storm_share, limits.storm_window, limits.storm_pause)
        self._pace_limits = limits.pace
        self._paces = Paces(limits.pace)
        self._waiting = Waiting()
        self._target_leases: dict[str, dict[LeaseId, Lease]] = {}
        self._active: dict[LeaseId, Lease] = {}
        self._holders: dict[ProxyKey, dict[LeaseId, Lease]] = {}
        # Active leases per target, per proxy holding any.
        self._pairs: dict[ProxyKey, dict[str | None, int]] = {}
        self._expiry_queue: list[tuple[float, LeaseId]] = []
        self._ended = EndedLeases(limits.cooldown_window)
        # Leases released before their end, per proxy -> that end (when it is forgotten).
        self._revoked: dict[ProxyKey, dict[LeaseId, float]] = {}
        # Renewed active leases per proxy -> their current end (dropped when they end).
        self._renewed: dict[ProxyKey, dict[LeaseId, float]] = {}

    @property
    def max_ttl(self) -> int:
        """The longest lease, in seconds, a client may ask for."""
        return self._max_ttl

    async def acquire(
        self, pool: CandidatePool, target: str | None, ttl_seconds: int, held: int = 0
    ) -> Lease | NoMatch:
        """Lease the best free proxy of the pool for `target`, or say why none is free
        (`held`: the requester's leases for the target; a refusal says it waits)."""
        self._check_ttl(ttl_seconds)
        if target is not None:
            # One string per target, however many leases and cooldowns name it, rather
            # than each request body's own copy kept for the lease's life (an interned
            # string is freed once nothing refers to it).
            target = sys.intern(target)
        with self._lock:
            now = self._clock.time()
            self._end_due(now)
            paused_until = None if target is None else self._storms.paused_until(target, now)
            full = None if paused_until is not None else self._target_full(pool, target, now)
            if full is not None:
                return self._refused(full, target, held, now)
            winner = None if paused_until is not None else self._first_idle(pool, target, now)
            if winner is None:
                outcome = self._least_loaded(pool, target, now, paused_until)
                if isinstance(outcome, NoMatch):
                    if paused_until is not None:
                        return outcome
                    return self._refused(outcome, target, held, now)
                winner = outcome
            lease = Lease(
                new_lease_id(),
                winner,
                target,
                ttl_seconds,
                now + ttl_seconds,
                pool_keys=pool.keys,
                pool_size=pool.considered,
                pace=self._pace(winner.key, target, now, joining=1),
            )
            self._active[lease.lease_id] = lease
            self._holders.setdefault(winner.key, {})[lease.lease_id] = lease
            pairs = self._pairs.setdefault(winner.key, {})
            pairs[target] = pairs.get(target, 0) + 1
            if target is not None:
                self._target_leases.setdefault(target, {})[lease.lease_id] = lease
            heapq.heappush(self._expiry_queue, (lease.expires_at, lease.lease_id))
            return lease

    def _target_full(self, pool: CandidatePool, target: str | None, now: float) -> NoMatch | None:
        """Why nothing is granted while the target holds all the leases its bounds allow."""
        if target is None or not self._pace_limits.targets:
            return None
        most = self._pace_limits.bounds_for(target).max_leases
        if most is None:
            return None
        leases = self._target_leases.get(target, {})
        if len(leases) < most:
            return None
        return NoMatch(
            considered=pool.considered,
            at_capacity=len(pool.ranked),
            in_cooldown=0,
            unhealthy=pool.not_offerable,
            retry_after=min(lease.expires_at for lease in leases.values()) - now,
            target_full=True,
        )

    def _refused(self, refusal: NoMatch, target: str | None, held: int, now: float) -> NoMatch:
        """A refusal (not a paused target's): the target's holders learn that a crawler waits,
        and it asks again soon if others hold more of the target than it does."""
        if target is None:
            return refusal
        self._waiting.refused(target, held, now)
        leases = len(self._target_leases.get(target, ()))
        return replace(refusal, retry_after=contended_retry(refusal.retry_after, leases, held))

    def _pace(self, key: ProxyKey, target: str | None, now: float, joining: int = 0) -> Pace:
        """The pace of one holder of the pair now (`joining`: a holder not counted yet)."""
        limits = self._pace_limits
        bounds = limits.bounds_for(target)
        holders = joining + self._pairs.get(key, {}).get(target, 0)
        leases = joining + (0 if target is None else len(self._target_leases.get(target, ())))
        learned = self._paces.learned(key, target, now)
        waiting = self._waiting.held_by_waiting(target, now)
        return handed_out(learned, bounds, holders, leases, limits.cap_for(bounds), waiting)

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
        """The full walk: the proxy with room for the target and the fewest leases for it,
        then in all; or why none has room."""
        holders, cooldowns = self._holders, self._cooldowns
        no_pairs: dict[str | None, int] = {}
        winner, winner_load = None, (0, 0)
        at_capacity = in_cooldown = 0
        for record in pool.ranked:
            pairs = self._pairs.get(record.key, no_pairs)
            load = (pairs.get(target, 0), len(holders.get(record.key, ())))
            if is_full_for(record, load[0], len(pairs)):
                at_capacity += 1
            elif paused_until is not None or cooldowns.is_cooling(record.key, target, now):
                in_cooldown += 1
            elif winner is None or load < winner_load:
                winner, winner_load = record, load
                if load == (0, 0):
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

    async def renew(
        self, lease_id: LeaseId, ttl_seconds: int, records: RecordLookup | None = None
    ) -> Lease | None:
        """Extend an active lease to end `ttl_seconds` from now; None once it has ended."""
        self._check_ttl(ttl_seconds)
        with self._lock:
            now = self._clock.time()
            self._end_due(now)
            lease = self._active.get(lease_id)
            if lease is None:
                return None
            renewed = replace(
                lease,
                ttl_seconds=ttl_seconds,
                expires_at=now + ttl_seconds,
                pace=self._pace(lease.proxy.key, lease.target, now),
            )
            self._active[lease_id] = renewed
            self._holders[lease.proxy.key][lease_id] = renewed
            if lease.target is not None:
                self._target_leases[lease.target][lease_id] = renewed
            self._renewed.setdefault(lease.proxy.key, {})[lease_id] = renewed.expires_at
            heapq.heappush(self._expiry_queue, (renewed.expires_at, lease_id))
            self._compact_expiry_queue()
            return renewed

    async def release(self, lease_id: LeaseId) -> ProxyKey | None:
        """End a lease now; its proxy, or None when it was unknown, expired or released.

        The lease stays revoked on its proxy for max ttl, the longest its
        credentials can outlive it.
        """
        with self._lock:
            now = self._clock.time()
            self._end_due(now)
            lease = self._active.get(lease_id)
            if lease is None:
                return None
            self._end(lease, now)
            self._compact_expiry_queue()
            key = lease.proxy.key
            revoked = self._revoked.setdefault(key, {})
            if len(revoked) >= _PRUNE_AFTER and not len(revoked) & (len(revoked) - 1):
                _unexpired(self._revoked, key, now)  # at each power of two: amortised O(1)
            self._revoked.setdefault(key, revoked)[lease_id] = lease.expires_at
            return key

    async def lease_ends(self, key: ProxyKey) -> LeaseEnds:
        """The proxy's leases released before their end, and those renewed."""
        with self._lock:
            now = self._clock.time()
            revoked = _unexpired(self._revoked, key, now)
            renewed = _unexpired(self._renewed, key, now)
            return LeaseEnds(tuple(revoked), dict(renewed))

    async def report(
        self,
        lease_id: LeaseId,
        result: ReportResult,
        target: str | None,
        retry_after: float | None = None,
        records: RecordLookup | None = None,
        count: int = 1,
        accepted: int | None = None,
    ) -> ReportOutcome | None:
        """Record what the holder saw; None when the lease is unknown.

        A lease is known while active and for one cooldown window after it ends.
        The cooldown's target is the report's, else the lease's, else global.
        `retry_after` (the site's Retry-After on a rate limit) sets that cooldown;
        `count` is how many requests an `ok` report counts (it raises the pace);
        `accepted` is what the site accepted in the second before a rate limit.
        """
        with self._lock:
            now = self._clock.time()
            self._end_due(now)
            lease = self._active.get(lease_id) or self._ended.get(lease_id)
            if lease is None:
                return None
            resolved = target if target is not None else lease.target
            key = lease.proxy.key
            self._cooldowns.record((key, resolved), result, now, retry_after)
            if result is not ReportResult.BANNED:
                self._paces.record(
                    key,
                    resolved,
                    now=now,
                    ok=count,
                    rate_limited=result is ReportResult.RATE_LIMITED,
                    retry_after=retry_after,
                    accepted=accepted,
                )
            paused_until = None
            if result is ReportResult.BANNED and resolved is not None:
                self._storms.prune(now)
                paused_until = self._storms.record_ban(
                    resolved, key, lease.pool_keys, lease.pool_size, now
                )
            return ReportOutcome(lease, resolved, paused_until, self._pace(key, resolved, now))

    async def forget_proxy(self, key: ProxyKey) -> None:
        """The proxy is gone: end its leases (late reports included) and drop its cooldowns."""
        with self._lock:
            self._pairs.pop(key, None)
            self._revoked.pop(key, None)
            self._renewed.pop(key, None)
            for lease in self._holders.pop(key, {}).values():
                del self._active[lease.lease_id]
                self._drop_from_target(lease)
            self._ended.forget_proxy(key)
            self._cooldowns.forget_proxy(key)
            self._paces.forget_proxy(key)
            self._compact_expiry_queue()

    async def cooldowns(self) -> list[Cooling]:
        """The pairs cooling now, the soonest to end first (at most MAX_COOLDOWNS_LISTED)."""
        with self._lock:
            now = self._clock.time()
            self._end_due(now)
            cooling = heapq.nsmallest(
                MAX_COOLDOWNS_LISTED, self._cooldowns.cooling(now), key=lambda c: c[1]
            )
        return [Cooling(key, target, until, ban) for (key, target), until, ban in cooling]

    async def clear_cooldown(self, key: ProxyKey, target: str | None) -> bool:
        """End the pair's cooldown now and forget its strikes; True when it was cooling."""
        with self._lock:
            now = self._clock.time()
            self._end_due(now)
            return self._cooldowns.clear((key, target), now)

    async def active_counts(self) -> dict[ProxyKey, int]:
        """Active leases per proxy, for proxies holding at least one."""
        with self._lock:
            self._end_due(self._clock.time())
            return {key: len(leases) for key, leases in self._holders.items()}

    async def pair_counts(self) -> dict[ProxyKey, dict[str | None, int]]:
        """Active leases per {proxy, target} pair, for proxies holding at least one."""
        with self._lock:
            self._end_due(self._clock.time())
            return {key: dict(pairs) for key, pairs in self._pairs.items()}

    async def counts(self) -> LeaseCounts:
        """The fleet-wide totals now."""
        return self.last_counts()

    def last_counts(self) -> LeaseCounts:
        """The fleet-wide totals now (memory is always current)."""
        with self._lock:
            now = self._clock.time()
            self._end_due(now)
            return LeaseCounts(
                leases=len(self._active),
                cooldowns=self._cooldowns.active_count(now),
                paused_targets=self._storms.paused_count(now),
            )

    async def ping(self) -> None:
        """Memory always answers."""

    async def close(self) -> None:
        """Nothing to let go of."""

    def __repr__(self) -> str:
        counts = self.last_counts()
        return (
            f"<MemoryLeaseStore [leases: {counts.leases} active | cooldowns: {counts.cooldowns} | "
            f"paused targets: {counts.paused_targets}]>"
        )

    def _end_due(self, now: float) -> None:
        queue = self._expiry_queue
        while queue and queue[0][0] <= now:
            expires_at, lease_id = heapq.heappop(queue)
            lease = self._active.get(lease_id)
            if lease is not None and lease.expires_at == expires_at:
                self._end(lease, expires_at)
        self._ended.forget_due(now)
        self._cooldowns.prune(now)
        self._paces.prune(now)

    def _end(self, lease: Lease, ended_at: float) -> None:
        del self._active[lease.lease_id]
        key = lease.proxy.key
        renewed = self._renewed.get(key)
        if renewed is not None and renewed.pop(lease.lease_id, None) is not None and not renewed:
            del self._renewed[key]
        holders = self._holders[key]
        del holders[lease.lease_id]
        if not holders:
            del self._holders[key]
        pairs = self._pairs[key]
        pairs[lease.target] -= 1
        if not pairs[lease.target]:
            del pairs[lease.target]
            if not pairs:
                del self._pairs[key]
        self._drop_from_target(lease)
        self._ended.add(lease, ended_at)

    def _drop_from_target(self, lease: Lease) -> None:
        if lease.target is None:
            return
        leases = self._target_leases[lease.target]
        del leases[lease.lease_id]
        if not leases:
            del self._target_leases[lease.target]

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
        free_at = now
        pairs = self._pairs.get(record.key, {})
        if is_full_for(record, pairs.get(target, 0), len(pairs)):
            free_at = _room_at(self._holders[record.key].values(), target)
        cooling_until = self._cooldowns.cooling_until(record.key, target, now)
        return free_at if cooling_until is None else max(free_at, cooling_until)

    def _compact_expiry_queue(self) -> None:
        # Released leases leave their deadline behind; rebuild once stale entries dominate.
        if len(self._expiry_queue) > 2 * len(self._active) + 1024:
            self._expiry_queue = [(lease.expires_at, i) for i, lease in self._active.items()]
            heapq.heapify(self._expiry_queue)


def _unexpired(
    entries: dict[ProxyKey, dict[LeaseId, float]], key: ProxyKey, now: float
) -> dict[LeaseId, float]:
    """The proxy's entries whose time has not passed (the rest are dropped)."""
    kept = entries.get(key)
    if not kept:
        return {}
    for lease_id in [i for i, until in kept.items() if until <= now]:
        del kept[lease_id]
    if not kept:
        del entries[key]
    return kept


def _room_at(leases: Iterable[Lease], target: str | None) -> float:
    """When a full proxy holding `leases` has room for `target`: the first of its leases
    for the target to end, else (it carries as many targets as it may) the first of its
    other targets to have all its leases end."""
    ends: dict[str | None, list[float]] = {}
    for lease in leases:
        ends.setdefault(lease.target, []).append(lease.expires_at)
    if target in ends:
        return min(ends[target])
    return min(max(times) for times in ends.values())
