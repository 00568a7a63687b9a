"""The report and ban counts the console shows: this process's, or (with Redis) the fleet's.

    counts = TroubleCounts          what the views ask: reports per site, bans per proxy
    LeaseBook                       counts what this process's discovery API was told
    RedisTally                      counts what every replica sharing the Redis prefix was told

With the Redis lease store each replica serves some of the crawlers, so its own
book sees some of the reports. A RedisTally adds each replica's reports into
counters in the same Redis, under the store's key prefix, and every replica's
console reads the sums, so all show the same shares and bans:

    {prefix}:console:reports:<minute>  hash  "<target>\\n<ok|rate_limited|banned>" -> count
    {prefix}:console:bans:<hour>       hash  proxy key -> bans reported that hour

Each key expires once it is out of its window (the reports after an hour and
a minute, the bans after a day), so Redis holds at most 62 report keys and 26
ban keys; bans count by the hour (the current one and the 23 before). Counting
stays off the lease API's path: a report adds to a local buffer (at most
MAX_PENDING entries; beyond, counts are dropped and logged), flushed every
FLUSH_SECONDS in one pipeline; the sums are read every REFRESH_SECONDS (one
pipeline of 85 HGETALLs). While Redis does not answer, the buffer waits and
the last sums stay shown.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Mapping
from typing import Any, Protocol

from egress_proxies.catalog import ProxyKey
from egress_proxies.clock import Clock
from egress_proxies.leases import ReportResult
from egress_proxies.leases.opening import MEMORY
from egress_proxies.leases.urls import redact_url

logger = logging.getLogger(__name__)

REPORT_WINDOW = 3600.0  # as the book's: the shares are over the last hour
MINUTE, HOUR = 60.0, 3600.0
BAN_HOURS = 24
FLUSH_SECONDS = 1.0
REFRESH_SECONDS = 2.0
MAX_PENDING = 10_000
_COLUMNS = {ReportResult.OK: 0, ReportResult.RATE_LIMITED: 1, ReportResult.BANNED: 2}
_NAMES = {column: result.value for result, column in _COLUMNS.items()}
_COLUMN_OF = {name: column for column, name in _NAMES.items()}


class TroubleCounts(Protocol):
    """Reports per site over the last hour and bans per proxy over the last day."""

    def site_reports(self, target: str, now: float) -> tuple[int, int, int]:
        """Reports for `target` over the last hour: ok (requests), rate limited, banned."""
        ...

    def bans_last_day(self, key: ProxyKey) -> int:
        """How often the proxy was reported banned in the last 24 hours."""
        ...


class RedisTally:
    """TroubleCounts summed over every replica sharing a Redis prefix (see the module)."""

    def __init__(self, url: str, *, prefix: str, timeout: float, clock: Clock) -> None:
        # Imported here: redis-py costs an operator on the memory store memory it never uses.
        from redis.asyncio import Redis  # noqa: PLC0415

        self._redis: Any = Redis.from_url(
            url, socket_timeout=timeout, socket_connect_timeout=timeout, decode_responses=True
        )
        self._where = f"{redact_url(url)} prefix {prefix!r}"
        self._base = f"{{{prefix}}}:console:"
        self._clock = clock
        self._timeout = timeout
        self._reports: dict[tuple[int, str, int], int] = {}  # (minute, target, column) -> n
        self._bans: dict[tuple[int, str], int] = {}  # (hour, proxy) -> n
        self._site_sums: dict[str, tuple[int, int, int]] = {}
        self._ban_sums: dict[str, int] = {}
        self._dropped = 0
        self._failing = False

    def __repr__(self) -> str:
        return (
            f"<RedisTally {self._where} [pending: {len(self._reports) + len(self._bans)} | "
            f"sites: {len(self._site_sums)} | proxies banned: {len(self._ban_sums)}]>"
        )

    def reported(self, key: ProxyKey, target: str | None, result: ReportResult, count: int) -> None:
        """One accepted report: counted locally, added to Redis at the next flush."""
        now = self._clock.time()
        if len(self._reports) + len(self._bans) >= MAX_PENDING:
            self._dropped += 1
            return
        if target is not None:
            entry = (int(now // MINUTE), target, _COLUMNS[result])
            self._reports[entry] = self._reports.get(entry, 0) + (
                count if result is ReportResult.OK else 1
            )
        if result is ReportResult.BANNED:
            hour = (int(now // HOUR), key)
            self._bans[hour] = self._bans.get(hour, 0) + 1

    def site_reports(self, target: str, now: float) -> tuple[int, int, int]:
        """The fleet's reports for `target` over the last hour, as last read."""
        return self._site_sums.get(target, (0, 0, 0))

    def bans_last_day(self, key: ProxyKey) -> int:
        """The fleet's bans of the proxy over the last 24 hours (to the hour), as last read."""
        return self._ban_sums.get(key, 0)

    def sites(self) -> list[str]:
        """Every site with a report in the last hour, as last read."""
        return list(self._site_sums)

    async def flush(self) -> None:
        """Add the buffered counts to Redis (one pipeline); kept for later when it fails."""
        if not self._reports and not self._bans:
            return
        reports, bans = self._reports, self._bans
        self._reports, self._bans = {}, {}
        now = self._clock.time()
        pipe = self._redis.pipeline(transaction=False)
        # Relative TTLs: Redis's clock need not agree with ours (the store's neither).
        for (minute, target, column), count in reports.items():
            name = f"{self._base}reports:{minute}"
            pipe.hincrby(name, f"{target}\n{_NAMES[column]}", count)
            pipe.expire(name, _ttl((minute + 1) * MINUTE + REPORT_WINDOW + MINUTE, now))
        for (hour, key), count in bans.items():
            name = f"{self._base}bans:{hour}"
            pipe.hincrby(name, key, count)
            pipe.expire(name, _ttl((hour + BAN_HOURS + 1) * HOUR, now))
        if await self._run(pipe) is None:
            for entry, count in reports.items():
                self._reports[entry] = self._reports.get(entry, 0) + count
            for banned, count in bans.items():
                self._bans[banned] = self._bans.get(banned, 0) + count

    async def refresh(self) -> None:
        """Read the fleet's sums for the last hour's reports and the last day's bans."""
        now = self._clock.time()
        minute, hour = int(now // MINUTE), int(now // HOUR)
        minutes = [
            m for m in range(minute - 60, minute + 1) if (m + 1) * MINUTE > now - REPORT_WINDOW
        ]
        pipe = self._redis.pipeline(transaction=False)
        for m in minutes:
            pipe.hgetall(f"{self._base}reports:{m}")
        for h in range(hour - BAN_HOURS + 1, hour + 1):
            pipe.hgetall(f"{self._base}bans:{h}")
        replies = await self._run(pipe)
        if replies is None:
            return
        self._site_sums = _site_sums(replies[: len(minutes)])
        bans: dict[str, int] = {}
        for reply in replies[len(minutes) :]:
            for key, count in reply.items():
                bans[key] = bans.get(key, 0) + int(count)
        self._ban_sums = bans

    async def close(self) -> None:
        """Let go of the connections (what is not flushed yet is lost)."""
        await self._redis.aclose()

    async def run(self) -> None:
        """Flush and refresh until cancelled (then flush once more and close)."""
        refreshed = -math.inf
        try:
            while True:
                await self.flush()
                if self._clock.monotonic() - refreshed >= REFRESH_SECONDS:
                    await self.refresh()
                    refreshed = self._clock.monotonic()
                if self._dropped:
                    logger.warning(
                        "console tally: %d reports not counted (buffer full)", self._dropped
                    )
                    self._dropped = 0
                await self._clock.sleep(FLUSH_SECONDS)
        finally:
            await self.flush()
            await self.close()

    async def _run(self, pipe: Any) -> list[Any] | None:
        from redis import exceptions as redis_errors  # noqa: PLC0415

        try:
            async with asyncio.timeout(self._timeout):
                replies: list[Any] = await pipe.execute()
        except (redis_errors.RedisError, OSError, TimeoutError) as error:
            if not self._failing:
                logger.warning(
                    "console tally: %s unavailable (%s); shown numbers wait for it",
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


def _ttl(deadline: float, now: float) -> int:
    return max(1, math.ceil(deadline - now))


def _site_sums(replies: list[Mapping[str, str]]) -> dict[str, tuple[int, int, int]]:
    sums: dict[str, list[int]] = {}
    for reply in replies:
        for field, count in reply.items():
            target, _, result = field.rpartition("\n")
            column = _COLUMN_OF.get(result)
            if column is None or not target:
                continue
            sums.setdefault(target, [0, 0, 0])[column] += int(count)
    return {target: (ok, limited, banned) for target, (ok, limited, banned) in sums.items()}
