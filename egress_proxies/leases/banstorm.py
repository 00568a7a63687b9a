"""The ban-storm guard: when most of a pool is banned by one target, pause the target.

A site that bans one proxy after another is banning the crawler, not the proxies:
handing out the rest of the pool only burns it. Pure bookkeeping over plain values;
the LeaseStore's lock guards every call.
"""

from __future__ import annotations

from collections.abc import Collection

from egress_proxies.catalog import ProxyKey

DEFAULT_STORM_SHARE = 0.5
DEFAULT_STORM_WINDOW = 60.0
DEFAULT_STORM_PAUSE = 300.0


class BanStorms:
    """Recent bans per target, and the targets paused because of them.

    A target pauses for `pause` seconds when, within `window` seconds, more than
    `share` of a pool's proxies (and at least two) were reported banned by it.
    """

    def __init__(
        self,
        share: float = DEFAULT_STORM_SHARE,
        window: float = DEFAULT_STORM_WINDOW,
        pause: float = DEFAULT_STORM_PAUSE,
    ) -> None:
        if not 0 < share <= 1 or window <= 0 or pause <= 0:
            raise ValueError("storm share must be in (0, 1], window and pause positive")
        self._share = share
        self._window = window
        self._pause = pause
        self._bans: dict[str, dict[ProxyKey, float]] = {}
        self._paused: dict[str, float] = {}

    def record_ban(
        self, target: str, key: ProxyKey, pool: Collection[ProxyKey], pool_size: int, now: float
    ) -> float | None:
        """Note a ban; return the end of a pause it starts (None when it starts none)."""
        bans = self._bans.setdefault(target, {})
        bans[key] = now
        horizon = now - self._window
        for stale in [k for k, at in bans.items() if at <= horizon]:
            del bans[stale]
        if self.paused_until(target, now) is not None:
            return None
        banned = sum(1 for k in bans if k in pool)
        if banned >= 2 and banned > self._share * pool_size:
            until = self._paused[target] = now + self._pause
            bans.clear()
            return until
        return None

    def paused_until(self, target: str, now: float) -> float | None:
        """When the target's pause ends, or None when it is not paused."""
        until = self._paused.get(target)
        if until is None:
            return None
        if until <= now:
            del self._paused[target]
            return None
        return until

    def paused_count(self, now: float) -> int:
        """Targets paused right now."""
        return sum(1 for until in self._paused.values() if until > now)

    def prune(self, now: float) -> None:
        """Drop ended pauses and targets without a recent ban."""
        for target in [t for t, until in self._paused.items() if until <= now]:
            del self._paused[target]
        horizon = now - self._window
        for target in [
            t for t, bans in self._bans.items() if max(bans.values(), default=0) <= horizon
        ]:
            del self._bans[target]
