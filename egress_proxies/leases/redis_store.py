"""The Redis lease store: leases and cooldowns shared by every API process, kept across restarts.

Each operation is ONE round trip: an EVALSHA of a Lua script (leases/lua/*.lua,
each prefixed with common.lua) that first ends what the caller's clock says is
over and then does the whole decision atomically inside Redis. Selector
matching and health stay in Python (the fleet index); each pool of ranked
offerable candidates with their capacities (leases per target, targets at once)
is uploaded to Redis once, under a digest of its content (an acquire naming an
unknown digest is answered "upload it", the only case with more round trips), and
the acquire script walks it only as far as the first idle proxy, doing capacity,
cooldowns, the ban-storm pause, "fewest leases" and the 409 counts.
A NOSCRIPT reply (Redis restarted or flushed its script cache) reloads the
scripts and retries once. Any connection error or timeout becomes
StoreUnavailableError: nothing hangs past `timeout`.
"""

from __future__ import annotations

import asyncio
import hashlib
import math
from dataclasses import dataclass
from importlib import resources
from typing import Any

from redis import exceptions as redis_errors
from redis.asyncio import ConnectionPool, Redis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

from egress_proxies.catalog import ProxyKey
from egress_proxies.clock import Clock, SystemClock
from egress_proxies.leases.candidates import CandidatePool
from egress_proxies.leases.lease import (
    Lease,
    LeaseId,
    NoMatch,
    ReportOutcome,
    ReportResult,
    new_lease_id,
)
from egress_proxies.leases.limits import LeaseLimits
from egress_proxies.leases.pace import Pace, PaceState, handed_out
from egress_proxies.leases.store import (
    MAX_COOLDOWNS_LISTED,
    Cooling,
    InvalidTtlError,
    LeaseCounts,
    LeaseEnds,
    RecordLookup,
    StoreUnavailableError,
)
from egress_proxies.leases.urls import redact_url
from egress_proxies.leases.waiting import CONTENDED_RETRY, WAITING_WINDOW

# Connections per process: enough to keep Redis busy, few enough to stay kind to it.
MAX_CONNECTIONS = 16
SCRIPTS = (
    "acquire",
    "pool",
    "release",
    "renew",
    "report",
    "forget",
    "counts",
    "pairs",
    "cooling",
    "clear",
    "ends",
)
# Pools (content-addressed key sets for the ban-storm guard) outlive any lease on them.
_UNAVAILABLE = (
    redis_errors.ConnectionError,
    redis_errors.TimeoutError,
    redis_errors.BusyLoadingError,
    OSError,
    TimeoutError,
)


def _script_text(name: str) -> str:
    folder = resources.files("egress_proxies.leases") / "lua"
    return (folder / "common.lua").read_text() + "\n" + (folder / f"{name}.lua").read_text()


@dataclass(frozen=True)
class _PoolArgs:
    """A pool's acquire arguments, built once per CandidatePool object."""

    pool: CandidatePool
    digest: str
    flat: tuple[str, ...]


class RedisLeaseStore:
    """Leases and cooldowns in Redis (or Valkey), under one key prefix.

    Times come from the injected clock, so every process sharing a prefix must
    keep its clock in sync (NTP): a lease ends when the caller's clock passes
    its end. Keys sit under one hash tag (`{prefix}:`), so a cluster keeps them
    in one slot.
    """

    def __init__(
        self,
        url: str,
        *,
        prefix: str,
        timeout: float,
        limits: LeaseLimits | None = None,
        clock: Clock | None = None,
    ) -> None:
        self._limits = limits = limits or LeaseLimits()
        self._clock = clock or SystemClock()
        self._timeout = timeout
        self._where = f"{redact_url(url)} prefix {prefix!r}"
        self._base = f"{{{prefix}}}:"
        # At most MAX_CONNECTIONS calls run at once; the rest queue on `_turns`, first
        # come first served (the blocking pool's own wait is not fair: with more
        # callers than connections some starved to the timeout), so the pool itself
        # never has to wait. No socket timeout: `_call` bounds the whole call, and
        # redis-py drops a connection whose call was cancelled mid-reply (a socket
        # timeout would also cost a task per command, wait_for on Python 3.11).
        pool = ConnectionPool.from_url(
            url,
            max_connections=MAX_CONNECTIONS,
            socket_timeout=None,
            socket_connect_timeout=timeout,
            retry=Retry(NoBackoff(), 0),
            decode_responses=True,
        )
        self._redis: Redis = Redis.from_pool(pool)
        self._turns = asyncio.Semaphore(MAX_CONNECTIONS)
        self._texts = {name: _script_text(name) for name in SCRIPTS}
        self._shas = {
            name: hashlib.sha1(text.encode(), usedforsecurity=False).hexdigest()
            for name, text in self._texts.items()
        }
        window = limits.cooldown_window
        self._window = repr(window)
        self._report_limits = (
            repr(window),
            repr(limits.ban_backoff_cap),
            repr(limits.rate_limit_window),
            str(1 + math.ceil(math.log2(limits.ban_backoff_cap / window))),
            str(1 + math.ceil(math.log2(max(window / limits.rate_limit_window, 1.0)))),
            repr(limits.storm_share),
            repr(limits.storm_window),
            repr(limits.storm_pause),
        )
        self._pool_ttl_ms = str(int((limits.max_ttl + window + limits.storm_window) * 1000))
        pace = limits.pace
        self._pace_args = tuple(
            repr(value)
            for value in (
                pace.start,
                pace.floor,
                pace.increase,
                pace.decrease,
                pace.settle,
                pace.memory,
                pace.ceiling,
                pace.cruise,
                pace.probe_after,
            )
        )
        self._pools: dict[int, _PoolArgs] = {}
        self._last_counts = LeaseCounts()

    @property
    def max_ttl(self) -> int:
        """The longest lease, in seconds, a client may ask for."""
        return self._limits.max_ttl

    async def acquire(
        self, pool: CandidatePool, target: str | None, ttl_seconds: int, held: int = 0
    ) -> Lease | NoMatch:
        """Lease the best free proxy of the pool for `target`, or say why none is free
        (`held`: the requester's leases for the target; a refusal says it waits)."""
        self._check_ttl(ttl_seconds)
        args = self._pool_args(pool)
        bounds = self._limits.pace.bounds_for(target)
        now = self._clock.time()
        lease_id = new_lease_id()
        acquire = (
            repr(now),
            str(ttl_seconds),
            target or "",
            lease_id,
            args.digest,
            str(pool.considered),
            self._window,
            self._pool_ttl_ms,
            "" if bounds.max_leases is None else str(bounds.max_leases),
            repr(self._limits.pace.cap_for(bounds)),
            str(held),
            repr(WAITING_WINDOW),
            repr(CONTENDED_RETRY),
            *self._pace_args,
        )
        reply = await self._run("acquire", *acquire)
        if reply[0] == 2:
            # First use of this pool (or it expired): upload it, then ask again.
            await self._run("pool", args.digest, self._pool_ttl_ms, *args.flat)
            reply = await self._run("acquire", *acquire)
        if reply[0] == 1:
            return Lease(
                lease_id,
                pool.ranked[int(reply[1]) - 1],
                target,
                ttl_seconds,
                float(reply[2]),
                pool_keys=pool.keys,
                pool_size=pool.considered,
                pace=self._pace(target, reply[3:8]),
            )
        free_at = float(reply[3]) if reply[3] else None
        return NoMatch(
            considered=pool.considered,
            at_capacity=int(reply[1]),
            in_cooldown=int(reply[2]),
            unhealthy=pool.not_offerable,
            retry_after=None if free_at is None else free_at - now,
            target_paused=reply[4] == 1,
            target_full=reply[5] == 1,
        )

    async def renew(
        self, lease_id: LeaseId, ttl_seconds: int, records: RecordLookup
    ) -> Lease | None:
        """Extend an active lease to end `ttl_seconds` from now; None once it has ended.

        Also None when `records` no longer knows the proxy (it is gone).
        """
        self._check_ttl(ttl_seconds)
        reply = await self._run(
            "renew",
            repr(self._clock.time()),
            lease_id,
            str(ttl_seconds),
            self._window,
            *self._pace_args,
        )
        if reply is None:
            return None
        key, target, expires_at, _, pool_size = reply[:5]
        record = records(ProxyKey(key))
        if record is None:
            return None
        return Lease(
            lease_id,
            record,
            target or None,
            ttl_seconds,
            float(expires_at),
            pool_size=int(pool_size),
            pace=self._pace(target or None, reply[5:10]),
        )

    async def release(self, lease_id: LeaseId) -> ProxyKey | None:
        """End a lease now; its proxy, or None when it was unknown, expired or released."""
        key = await self._run("release", repr(self._clock.time()), lease_id, self._window)
        return ProxyKey(key) if key else None

    async def lease_ends(self, key: ProxyKey) -> LeaseEnds:
        """The proxy's leases released before their end, and those renewed."""
        reply = await self._run("ends", repr(self._clock.time()), key)
        count = int(reply[0])
        revoked = tuple(LeaseId(lease_id) for lease_id in reply[1 : 1 + count])
        rest = reply[1 + count :]
        renewed = {LeaseId(rest[i]): float(rest[i + 1]) for i in range(0, len(rest), 2)}
        return LeaseEnds(revoked, renewed)

    async def report(
        self,
        lease_id: LeaseId,
        result: ReportResult,
        target: str | None,
        retry_after: float | None,
        records: RecordLookup,
        count: int = 1,
        accepted: int | None = None,
    ) -> ReportOutcome | None:
        """Record what the holder saw; None when the lease is unknown (or ended too long ago)."""
        pace = self._limits.pace
        cap = "" if target is None else repr(pace.cap_for(pace.bounds_for(target)))
        reply = await self._run(
            "report",
            repr(self._clock.time()),
            lease_id,
            result.value,
            target or "",
            "" if retry_after is None else repr(retry_after),
            *self._report_limits,
            str(count),
            "" if accepted is None else str(accepted),
            cap,
            *self._pace_args,
        )
        if reply is None:
            return None
        key, lease_target, resolved, ttl, expires_at, _, pool_size, paused = reply[:8]
        record = records(ProxyKey(key))
        if record is None:
            return None
        lease = Lease(
            lease_id,
            record,
            lease_target or None,
            int(ttl),
            float(expires_at),
            pool_size=int(pool_size),
        )
        return ReportOutcome(
            lease,
            resolved or None,
            float(paused) if paused else None,
            self._pace(resolved or None, reply[8:13]),
        )

    async def forget_proxy(self, key: ProxyKey) -> None:
        """The proxy is gone: end its leases (late reports included) and drop its cooldowns."""
        await self._run("forget", repr(self._clock.time()), key, self._window)

    async def cooldowns(self) -> list[Cooling]:
        """The pairs cooling now, the soonest to end first (at most MAX_COOLDOWNS_LISTED)."""
        reply = await self._run(
            "cooling", repr(self._clock.time()), self._window, str(MAX_COOLDOWNS_LISTED)
        )
        return [
            Cooling(
                ProxyKey(reply[i]),
                None if reply[i + 1] == "g" else reply[i + 1].removeprefix("t:"),
                float(reply[i + 2]),
                reply[i + 3] == "1",
            )
            for i in range(0, len(reply), 4)
        ]

    async def clear_cooldown(self, key: ProxyKey, target: str | None) -> bool:
        """End the pair's cooldown now and forget its strikes; True when it was cooling."""
        reply = await self._run("clear", repr(self._clock.time()), self._window, key, target or "")
        return bool(reply)

    async def active_counts(self) -> dict[ProxyKey, int]:
        """Active leases per proxy, for proxies holding at least one."""
        return (await self._counts())[1]

    async def pair_counts(self) -> dict[ProxyKey, dict[str | None, int]]:
        """Active leases per {proxy, target} pair, for proxies holding at least one."""
        reply = await self._run("pairs", repr(self._clock.time()), self._window)
        per_pair: dict[ProxyKey, dict[str | None, int]] = {}
        for i in range(0, len(reply), 2):
            key, _, field = reply[i].partition("\n")
            target = None if field == "g" else field.removeprefix("t:")
            per_pair.setdefault(ProxyKey(key), {})[target] = int(reply[i + 1])
        return per_pair

    async def counts(self) -> LeaseCounts:
        """The fleet-wide totals now (remembered for `last_counts`)."""
        return (await self._counts())[0]

    def last_counts(self) -> LeaseCounts:
        """The totals as of the last `counts()` or `active_counts()` call."""
        return self._last_counts

    async def ping(self) -> None:
        """Return when Redis answers; raise StoreUnavailableError when it does not."""
        await self._call(self._redis.ping)

    async def close(self) -> None:
        """Close the connection pool (the state stays in Redis)."""
        await self._redis.aclose()

    def __repr__(self) -> str:
        counts = self._last_counts
        return (
            f"<RedisLeaseStore {self._where} [leases: {counts.leases} active | "
            f"cooldowns: {counts.cooldowns} | paused targets: {counts.paused_targets} "
            "(as last read)]>"
        )

    async def _counts(self) -> tuple[LeaseCounts, dict[ProxyKey, int]]:
        reply = await self._run("counts", repr(self._clock.time()), self._window)
        self._last_counts = LeaseCounts(int(reply[0]), int(reply[1]), int(reply[2]))
        held = reply[3:]
        per_proxy = {ProxyKey(held[i]): int(held[i + 1]) for i in range(0, len(held), 2)}
        return self._last_counts, per_proxy

    def _pace(self, target: str | None, reply: list[Any]) -> Pace:
        """A holder's pace from pace_reply's {learned rate, lowered at, holders, leases,
        leases of a waiting crawler}."""
        rate, lowered_at, holders, leases, waiting = reply
        learned = PaceState(float(rate), float(lowered_at) if lowered_at else None)
        bounds = self._limits.pace.bounds_for(target)
        cap = self._limits.pace.cap_for(bounds)
        waiting_held = int(waiting) if waiting else None
        return handed_out(learned, bounds, int(holders), int(leases), cap, waiting_held)

    def _pool_args(self, pool: CandidatePool) -> _PoolArgs:
        # Pools are built once per catalog snapshot and selector; so are their arguments.
        cached = self._pools.get(id(pool))
        if cached is not None and cached.pool is pool:
            return cached
        if len(self._pools) >= 4096:
            self._pools.clear()
        flat: list[str] = []
        for record in pool.ranked:
            most_targets = "" if record.max_targets is None else str(record.max_targets)
            flat += (record.key, str(record.max_leases), most_targets)
        digest = (
            hashlib.sha1("\n".join(flat).encode(), usedforsecurity=False).hexdigest()
            if flat
            else ""
        )
        args = self._pools[id(pool)] = _PoolArgs(pool, digest, tuple(flat))
        return args

    def _check_ttl(self, ttl_seconds: int) -> None:
        if not 1 <= ttl_seconds <= self._limits.max_ttl:
            raise InvalidTtlError(f"ttl must be between 1 and {self._limits.max_ttl} seconds")

    async def _run(self, script: str, *args: str) -> Any:
        """EVALSHA the script; on NOSCRIPT load them all and try once more."""
        try:
            return await self._call(self._redis.evalsha, self._shas[script], 1, self._base, *args)
        except redis_errors.NoScriptError:
            await self._load_scripts()
            return await self._call(self._redis.evalsha, self._shas[script], 1, self._base, *args)

    async def _load_scripts(self) -> None:
        for text in self._texts.values():
            await self._call(self._redis.script_load, text)

    async def _call(self, method: Any, *args: Any) -> Any:
        try:
            async with asyncio.timeout(self._timeout), self._turns:
                return await method(*args)
        except _UNAVAILABLE as error:
            raise StoreUnavailableError(
                f"lease store {self._where} unavailable: {type(error).__name__}",
                retry_after=max(1, math.ceil(self._timeout)),
            ) from None
