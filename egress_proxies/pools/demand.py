"""The demand book: bans per Proxy and lease requests waiting at capacity per pool.

The discovery API records into it as requests happen (it satisfies the
discovery tier's `PoolDemandRecorder` Protocol); the pool controller reads
counts over a window. It lives in the operator's process today. A separate
discovery tier would publish the same two counts (plus active leases, which
the controller reads from the lease store) through the pool's
`status.demand` or a metric instead; the controller only needs the numbers.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable

from egress_proxies.catalog import ProxyKey
from egress_proxies.clock import Clock, SystemClock

DEFAULT_HORIZON = 3600.0


class DemandBook:
    """Timestamps of bans (per Proxy) and of waits at capacity (per pool), kept for a horizon."""

    def __init__(self, clock: Clock | None = None, horizon: float = DEFAULT_HORIZON) -> None:
        self._clock = clock or SystemClock()
        self._horizon = horizon
        self._bans: dict[ProxyKey, deque[float]] = {}
        self._waits: dict[str, deque[float]] = {}

    def __repr__(self) -> str:
        bans = sum(len(times) for times in self._bans.values())
        waits = sum(len(times) for times in self._waits.values())
        return f"<DemandBook [bans: {bans} on {len(self._bans)} proxies | waits: {waits}]>"

    def banned(self, key: ProxyKey) -> None:
        """A crawler reported the proxy banned (by any target)."""
        self._add(self._bans.setdefault(key, deque()))

    def waited(self, pools: Iterable[str]) -> None:
        """A lease request was refused because the pools' proxies were at capacity."""
        for pool in pools:
            self._add(self._waits.setdefault(pool, deque()))

    def bans_since(self, key: ProxyKey, since: float) -> int:
        """Bans of one proxy reported at or after `since`."""
        return _count_since(self._bans.get(key), since)

    def waits_since(self, pool: str, since: float) -> int:
        """Waits at capacity of one pool (`namespace/name`) at or after `since`."""
        return _count_since(self._waits.get(pool), since)

    def forget_proxy(self, key: ProxyKey) -> None:
        """Drop a deleted proxy's bans."""
        self._bans.pop(key, None)

    def _add(self, times: deque[float]) -> None:
        now = self._clock.time()
        times.append(now)
        while times and times[0] < now - self._horizon:
            times.popleft()


def _count_since(times: deque[float] | None, since: float) -> int:
    return sum(1 for moment in times or () if moment >= since)
