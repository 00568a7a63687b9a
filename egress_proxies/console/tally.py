"""The console's book shared in Redis: every replica notes into it, every console reads it.

With the Redis lease store each replica serves some of the crawlers, so its own
LeaseBook sees some of the leases and reports. A RedisTally is told the same
notes (grants, releases, reports, gone proxies) and keeps them in the same
Redis, under the store's key prefix; every replica's console reads one merged
book from it (`leases()`, `targets()`, `bans_last_day()`: the LeaseFacts the
views take), so all show the same numbers, and the history each samples from
it agrees too.

    {prefix}:console:leases          hash  lease digest -> [proxy, target, holder, granted,
                                           the id's first six characters] (JSON)
    {prefix}:console:lease-ends      hash  lease digest -> when it ends (a renewal moves it)
    {prefix}:console:targets         hash  target -> "lowered_at waiting_held seen_at"
    {prefix}:console:paces:<target>  hash  proxy -> "rate seen_at"  (expires after an hour)
    {prefix}:console:marks:<target>  zset  rate limits reported     (expires after an hour)
    {prefix}:console:reports:<minute>  hash  "<target>\\n<ok|rate_limited|banned>" -> count
    {prefix}:console:bans:<hour>       hash  proxy key -> bans reported that hour
    {prefix}:console:history:<n>       string the lease numbers of history sample n (at n x
                                              interval), JSON; expires after the span

Every key but the three hashes expires once it is out of its window (TTLs are
relative: Redis's clock need not agree with ours); ended leases and targets
unseen for an hour are deleted from those hashes as they are read, and both
are bounded like the book (MAX_LEASES, MAX_TARGETS). Lease ids are kept as
digests (the view shows the first six characters only). Writes stay off the
lease API's path: each note goes to a local buffer (at most MAX_PENDING
writes; beyond, they are dropped and logged), flushed every FLUSH_SECONDS in
one pipeline; the book is read every REFRESH_SECONDS in two pipelines. While
Redis does not answer, the writes wait and the last book stays shown.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
from collections.abc import Mapping
from typing import Any

from egress_proxies.catalog import ProxyKey
from egress_proxies.clock import Clock
from egress_proxies.console.history import SeriesKey
from egress_proxies.console.leasebook import (
    BAN_WINDOW,
    MAX_LEASES,
    MAX_TARGETS,
    REPORT_WINDOW,
    LiveLease,
    TargetBook,
)
from egress_proxies.console.sampler import Sample
from egress_proxies.leases import Lease, LeaseId, ReportOutcome, ReportResult
from egress_proxies.leases.opening import MEMORY
from egress_proxies.leases.urls import redact_url

logger = logging.getLogger(__name__)

MINUTE, HOUR = 60.0, 3600.0
BAN_HOURS = int(BAN_WINDOW // HOUR)
FLUSH_SECONDS = 1.0
REFRESH_SECONDS = 2.0
MAX_PENDING = 10_000
MAX_MARKS = 500
_COLUMN_OF = {"ok": 1, "rate_limited": 2, "banned": 3}  # a TargetBook minute row's columns
Write = tuple[str, tuple[Any, ...]]  # a redis-py pipeline method and its arguments


class RedisTally:
    """The console's notes of every replica sharing a Redis prefix, as one book (see module)."""

    def __init__(self, url: str, *, prefix: str, timeout: float, clock: Clock) -> None:
        # Imported here: redis-py costs an operator on the memory store memory it never uses.
        from redis.asyncio import Redis  # noqa: PLC0415

        self._redis: Any = Redis.from_url(
            url, socket_timeout=timeout, socket_connect_timeout=timeout, decode_responses=True
        )
        self._where = f"{redact_url(url)} prefix {prefix!r}"
        self._base = f"{{{prefix}}}:console:"
        self._clock = clock
        self._writes: list[Write] = []
        self._counts: dict[tuple[str, str], int] = {}  # (key, field) -> increment
        self._deadlines: dict[str, float] = {}  # a counted key -> when its window ends
        self._dropped = 0
        self._failing = False
        self._leases: list[LiveLease] = []
        self._targets: dict[str, TargetBook] = {}
        self._bans: dict[str, int] = {}
        self._sampled: int | None = None  # the last history sample returned (at // interval)

    def __repr__(self) -> str:
        return (
            f"<RedisTally {self._where} [pending: {len(self._writes) + len(self._counts)} | "
            f"leases: {len(self._leases)} | targets: {len(self._targets)}]>"
        )

    # -- notes, as the LeaseBook takes them (observed_store.py) --------------------------

    def granted(self, lease: Lease, holder: str | None = None) -> None:
        """A lease was granted or renewed (a renewal keeps the first holder and grant time)."""
        now = self._clock.time()
        digest = _digest(lease.lease_id)
        facts = [lease.proxy.key, lease.target, holder, now, lease.lease_id[:6]]
        self._write("hsetnx", self._key("leases"), digest, json.dumps(facts))
        self._write("hset", self._key("lease-ends"), digest, repr(lease.expires_at))
        if lease.target is not None and lease.pace is not None:
            self._pace(lease.proxy.key, lease.target, lease.pace.rate, now)
            self._target(lease.target, None, lease.pace.waiting_held, now)

    def released(self, lease_id: LeaseId) -> None:
        """A lease ended on request."""
        self._forget_lease(_digest(lease_id))

    def reported(self, outcome: ReportOutcome, result: ReportResult, count: int) -> None:
        """An accepted report: counted, and the pace after it kept."""
        now = self._clock.time()
        key, target = outcome.lease.proxy.key, outcome.target
        if result is ReportResult.BANNED:
            hour = int(now // HOUR)
            self._count(self._key(f"bans:{hour}"), key, 1, (hour + BAN_HOURS + 1) * HOUR)
        if target is None:
            return
        minute = int(now // MINUTE)
        self._count(
            self._key(f"reports:{minute}"),
            f"{target}\n{result.value}",
            count if result is ReportResult.OK else 1,
            (minute + 1) * MINUTE + REPORT_WINDOW + MINUTE,
        )
        if result is ReportResult.RATE_LIMITED:
            marks = self._key(f"marks:{target}")
            self._write("zadd", marks, {repr(now): now})
            self._write("zremrangebyrank", marks, 0, -MAX_MARKS - 1)
            self._write("expire", marks, int(REPORT_WINDOW))
        pace = outcome.pace
        if pace is not None:
            self._pace(key, target, pace.rate, now)
            self._target(target, pace.lowered_at, pace.waiting_held, now)

    def forgot(self, key: ProxyKey) -> None:
        """A proxy is gone: its leases, paces and bans go with it."""
        self._write("eval", _FORGET, 1, self._base, key)
        hour = int(self._clock.time() // HOUR)
        for h in range(hour - BAN_HOURS + 1, hour + 1):
            self._write("hdel", self._key(f"bans:{h}"), key)

    # -- the merged book, as the views read it (LeaseFacts) ------------------------------

    def leases(self) -> list[LiveLease]:
        """Every replica's live leases, oldest first, as last read."""
        now = self._clock.time()
        return [lease for lease in self._leases if lease.expires_at > now]

    def targets(self) -> dict[str, TargetBook]:
        """Every target any replica saw in the last hour, as last read."""
        return self._targets

    def bans_last_day(self, key: ProxyKey) -> int:
        """The fleet's bans of the proxy over the last 24 hours (to the hour), as last read."""
        return self._bans.get(key, 0)

    # -- keeping it current ---------------------------------------------------------------

    async def flush(self) -> None:
        """Send the buffered writes in one pipeline; kept for later when Redis does not answer."""
        if not self._writes and not self._counts:
            return
        writes, counts, deadlines = self._writes, self._counts, self._deadlines
        self._writes, self._counts, self._deadlines = [], {}, {}
        pipe = self._redis.pipeline(transaction=False)
        now = self._clock.time()
        for method, args in writes:
            getattr(pipe, method)(*args)
        for (key, field), increment in counts.items():
            pipe.hincrby(key, field, increment)
        for key, deadline in deadlines.items():
            pipe.expire(key, max(1, math.ceil(deadline - now)))
        if await self._run(pipe) is None:
            self._writes = writes + self._writes
            for entry, increment in counts.items():
                self._counts[entry] = self._counts.get(entry, 0) + increment
            self._deadlines |= deadlines

    async def refresh(self) -> None:
        """Read the merged book: leases, targets and their paces, reports and bans."""
        now = self._clock.time()
        minute, hour = int(now // MINUTE), int(now // HOUR)
        minutes = [
            m for m in range(minute - 61, minute + 1) if (m + 1) * MINUTE > now - REPORT_WINDOW
        ]
        pipe = self._redis.pipeline(transaction=False)
        pipe.hgetall(self._key("leases"))
        pipe.hgetall(self._key("lease-ends"))
        pipe.hgetall(self._key("targets"))
        for m in minutes:
            pipe.hgetall(self._key(f"reports:{m}"))
        for h in range(hour - BAN_HOURS + 1, hour + 1):
            pipe.hgetall(self._key(f"bans:{h}"))
        replies = await self._run(pipe)
        if replies is None:
            return
        leases = self._read_leases(replies[0], replies[1], now)
        targets = self._read_targets(replies[2], now)
        replies = replies[3:]
        if not await self._read_paces(targets):
            return
        for m, reply in zip(minutes, replies[: len(minutes)], strict=True):
            _count_minute(targets, m * MINUTE, reply)
        bans: dict[str, int] = {}
        for reply in replies[len(minutes) :]:
            for key, count in reply.items():
                bans[key] = bans.get(key, 0) + int(count)
        self._leases, self._targets, self._bans = leases, targets, bans

    async def _read_paces(self, targets: dict[str, TargetBook]) -> bool:
        """Each target's paces per proxy and rate-limit marks; False when Redis did not answer."""
        pipe = self._redis.pipeline(transaction=False)
        for target in targets:
            pipe.hgetall(self._key(f"paces:{target}"))
            pipe.zrange(self._key(f"marks:{target}"), 0, -1, withscores=True)
        replies = await self._run(pipe)
        if replies is None:
            return False
        for book, paces, marks in zip(targets.values(), replies[0::2], replies[1::2], strict=True):
            for key, value in paces.items():
                rate, seen = value.split(" ")
                book.paces[ProxyKey(key)] = (float(rate), float(seen))
            book.rate_limits.extend(score for _, score in marks)
        return True

    async def exchange(
        self, at: float, interval: float, span: float, values: Mapping[SeriesKey, float | None]
    ) -> list[tuple[float, Sample]]:
        """Offer `values` as the history sample at `at` (kept unless a replica's is already)
        and return, oldest first, every sample of the last `span` not returned before; on
        a Redis that does not answer, ours alone."""
        index, back = round(at / interval), math.ceil(span / interval) - 1
        first = index - back if self._sampled is None else max(self._sampled + 1, index - back)
        slots = list(range(first, index + 1))
        encoded = json.dumps([[what, who, value] for (what, who), value in values.items()])
        pipe = self._redis.pipeline(transaction=False)
        pipe.set(self._key(f"history:{index}"), encoded, nx=True, ex=math.ceil(span + interval))
        for slot in slots:
            pipe.get(self._key(f"history:{slot}"))
        replies = await self._run(pipe)
        self._sampled = index
        if replies is None:
            return [(at, dict(values))]
        samples = []
        for slot, reply in zip(slots, replies[1:], strict=True):
            if reply is not None:
                sample = {(what, who): value for what, who, value in json.loads(reply)}
                samples.append((slot * interval, sample))
        return samples

    async def close(self) -> None:
        """Let go of the connections (writes not flushed yet are lost)."""
        await self._redis.aclose()

    async def run(self) -> None:
        """Flush and refresh until cancelled (then flush once more and close)."""
        refreshed = -math.inf
        try:
            while True:
                await self.flush()
                if self._clock.monotonic() - refreshed >= REFRESH_SECONDS:
                    refreshed = self._clock.monotonic()
                    try:
                        await self.refresh()
                    except (ValueError, TypeError, KeyError) as error:
                        # A note this version cannot read (another version's): the last
                        # book stays shown, the next read tries again.
                        logger.warning("console tally: unreadable notes (%r)", error)
                if self._dropped:
                    logger.warning("console tally: %d writes dropped (buffer full)", self._dropped)
                    self._dropped = 0
                await self._clock.sleep(FLUSH_SECONDS)
        finally:
            await self.flush()
            await self.close()

    # -- helpers --------------------------------------------------------------------------

    def _key(self, name: str) -> str:
        return self._base + name

    def _write(self, method: str, *args: Any) -> None:
        if len(self._writes) >= MAX_PENDING:
            self._dropped += 1
            return
        self._writes.append((method, args))

    def _count(self, key: str, field: str, increment: int, deadline: float) -> None:
        if (key, field) not in self._counts and len(self._counts) >= MAX_PENDING:
            self._dropped += 1
            return
        self._counts[(key, field)] = self._counts.get((key, field), 0) + increment
        self._deadlines[key] = deadline

    def _pace(self, key: ProxyKey, target: str, rate: float, now: float) -> None:
        paces = self._key(f"paces:{target}")
        self._write("hset", paces, key, f"{rate!r} {now!r}")
        self._write("expire", paces, int(HOUR))

    def _target(
        self, target: str, lowered_at: float | None, waiting_held: int | None, now: float
    ) -> None:
        self._write(
            "eval",
            _TARGET,
            1,
            self._key("targets"),
            target,
            "" if lowered_at is None else repr(lowered_at),
            "" if waiting_held is None else str(waiting_held),
            repr(now),
        )

    def _read_leases(
        self, facts: dict[str, str], ends: dict[str, str], now: float
    ) -> list[LiveLease]:
        live: list[tuple[float, str, LiveLease]] = []
        for digest, value in facts.items():
            end = float(ends.get(digest) or 0.0)
            if end <= now:
                self._forget_lease(digest)
                continue
            proxy, target, holder, granted, shown = json.loads(value)
            lease = LiveLease(LeaseId(shown), ProxyKey(proxy), target, granted, end, holder)
            live.append((lease.granted_at, digest, lease))
        for digest, ended in ends.items():
            if digest not in facts and float(ended) <= now:  # a renewal outlived its grant
                self._write("hdel", self._key("lease-ends"), digest)
        live.sort(key=lambda entry: entry[0])
        for _, digest, _ in live[: max(0, len(live) - MAX_LEASES)]:
            self._forget_lease(digest)
        return [lease for _, _, lease in live[-MAX_LEASES:]]

    def _forget_lease(self, digest: str) -> None:
        self._write("hdel", self._key("leases"), digest)
        self._write("hdel", self._key("lease-ends"), digest)

    def _read_targets(self, reply: dict[str, str], now: float) -> dict[str, TargetBook]:
        seen: list[tuple[float, str, TargetBook]] = []
        for target, value in reply.items():
            lowered, waiting, seen_at = value.split(" ")
            if now - float(seen_at) > REPORT_WINDOW:
                self._write("hdel", self._key("targets"), target)
                continue
            book = TargetBook(
                lowered_at=float(lowered) if lowered else None,
                waiting_held=int(waiting) if waiting else None,
                seen_at=float(seen_at),
            )
            seen.append((float(seen_at), target, book))
        seen.sort(reverse=True)
        for _, target, _ in seen[MAX_TARGETS:]:
            self._write("hdel", self._key("targets"), target)
        return {target: book for _, target, book in sorted(seen[:MAX_TARGETS], key=_by_name)}

    async def _run(self, pipe: Any) -> list[Any] | None:
        from redis import exceptions as redis_errors  # noqa: PLC0415

        try:
            replies: list[Any] = await pipe.execute()
        except (redis_errors.RedisError, OSError, TimeoutError) as error:
            if not self._failing:
                logger.warning(
                    "console tally: %s unavailable (%s); the console shows the last numbers read",
                    self._where,
                    type(error).__name__,
                )
            self._failing = True
            return None
        if self._failing:
            logger.info("console tally: %s answers again", self._where)
        self._failing = False
        return replies


def open_tally(url: str, *, prefix: str, timeout: float, clock: Clock) -> RedisTally | None:
    """A RedisTally over the lease store's Redis and prefix; None for the memory store."""
    return None if url == MEMORY else RedisTally(url, prefix=prefix, timeout=timeout, clock=clock)


# A target's facts: ARGV target, lowered at ("": keep), waiting held ("": nobody), seen at.
_TARGET = """
local v = redis.call('HGET', KEYS[1], ARGV[1])
local lowered = ARGV[2]
if v then
  local was = string.match(v, '^(%S*) ')
  if lowered == '' or (was ~= '' and tonumber(was) > tonumber(lowered)) then lowered = was end
end
redis.call('HSET', KEYS[1], ARGV[1], lowered .. ' ' .. ARGV[3] .. ' ' .. ARGV[4])
return 1
"""
# A gone proxy's leases and paces: KEYS[1] the base, ARGV proxy key.
_FORGET = """
local leases = redis.call('HGETALL', KEYS[1] .. 'leases')
for i = 1, #leases, 2 do
  local ok, facts = pcall(cjson.decode, leases[i + 1])
  if ok and facts[1] == ARGV[1] then
    redis.call('HDEL', KEYS[1] .. 'leases', leases[i])
    redis.call('HDEL', KEYS[1] .. 'lease-ends', leases[i])
  end
end
for _, target in ipairs(redis.call('HKEYS', KEYS[1] .. 'targets')) do
  redis.call('HDEL', KEYS[1] .. 'paces:' .. target, ARGV[1])
end
return 1
"""


def _count_minute(targets: dict[str, TargetBook], start: float, reply: dict[str, str]) -> None:
    """One minute's report counts into each known target's rows."""
    rows: dict[str, list[float]] = {}
    for field, count in reply.items():
        target, _, result = field.rpartition("\n")
        if target in targets and result in _COLUMN_OF:
            row = rows.setdefault(target, [start, 0, 0, 0])
            row[_COLUMN_OF[result]] += int(count)
    for target, row in rows.items():
        targets[target].minutes.append(row)


def _digest(lease_id: str) -> str:
    return hashlib.sha256(lease_id.encode()).hexdigest()[:24]


def _by_name(entry: tuple[float, str, TargetBook]) -> str:
    return entry[1]
