"""Per {proxy, target} cooldowns after bad reports: short growing ones for rate limits,
exponential backoff for repeated bans."""

from __future__ import annotations

import heapq
import itertools
import math
from dataclasses import dataclass

from egress_proxies.catalog import ProxyKey
from egress_proxies.leases.lease import ReportResult

# A cooldown's target; None is the global one that blocks the proxy for every target.
Pair = tuple[ProxyKey, str | None]


@dataclass
class _PairState:
    until: float
    strikes: int
    rate_strikes: int
    from_ban: bool
    forget_at: float


class Cooldowns:
    """Which {proxy, target} pairs are cooling down, and how often each pair was refused.

    `rate_limited` cools a pair for the site's Retry-After when the report carries one
    (at most one ban window), else for rate_window x 2^(repeats-1), also at most one ban
    window: a rate limit says "slower", not "never", so it must not cost a proxy the
    minutes a ban does. `banned` cools it for window x 2^(strikes-1), capped, where
    strikes counts the pair's bans; a ban reported while the pair still cools from a ban
    adds no strike (several holders of a shared proxy see the same ban), an `ok` report
    clears both counts, and so does one cap's quiet time after the last cooldown ends.
    Not locked on its own: the LeaseStore's lock guards every call.
    """

    def __init__(self, window: float, backoff_cap: float, rate_window: float) -> None:
        self._window = window
        self._backoff_cap = backoff_cap
        self._rate_window = rate_window
        self._max_strikes = 1 + math.ceil(math.log2(backoff_cap / window))
        self._max_rate_strikes = 1 + math.ceil(math.log2(max(window / rate_window, 1.0)))
        self._pairs: dict[Pair, _PairState] = {}
        self._forget_queue: list[tuple[float, int, Pair]] = []
        self._sequence = itertools.count()

    def record(
        self,
        pair: Pair,
        result: ReportResult,
        now: float,
        retry_after: float | None = None,
    ) -> None:
        """Apply one report about a pair (`retry_after`: the site's, for rate limits)."""
        state = self._pairs.get(pair)
        if result is ReportResult.OK:
            if state is not None:
                state.strikes = state.rate_strikes = 0
                self._schedule_forget(pair, state, state.until)
            return
        strikes = state.strikes if state is not None else 0
        rate_strikes = state.rate_strikes if state is not None else 0
        if result is ReportResult.BANNED:
            if state is not None and state.from_ban and state.until > now:
                return
            strikes = min(strikes + 1, self._max_strikes)
            duration = min(self._window * 2 ** (strikes - 1), self._backoff_cap)
        elif retry_after is not None:
            duration = min(retry_after, self._window)
        else:
            if state is None or state.until <= now:
                rate_strikes = min(rate_strikes + 1, self._max_rate_strikes)
            duration = min(self._rate_window * 2 ** (max(rate_strikes, 1) - 1), self._window)
        until = now + duration
        if state is not None and state.until > until:
            until = state.until
        from_ban = result is ReportResult.BANNED or (
            state is not None and state.from_ban and state.until > now
        )
        state = _PairState(
            until=until,
            strikes=strikes,
            rate_strikes=rate_strikes,
            from_ban=from_ban,
            forget_at=0.0,
        )
        self._pairs[pair] = state
        remembers = strikes or rate_strikes
        self._schedule_forget(pair, state, until + self._backoff_cap if remembers else until)

    def cooling_until(self, key: ProxyKey, target: str | None, now: float) -> float | None:
        """When the proxy may serve this target again, or None when it does not cool."""
        ends = [
            state.until
            for pair in ((key, target), (key, None))
            if (state := self._pairs.get(pair)) is not None and state.until > now
        ]
        return max(ends) if ends else None

    def is_cooling(self, key: ProxyKey, target: str | None, now: float) -> bool:
        """True while the proxy cools for this target or globally."""
        if not self._pairs:
            return False
        return self.cooling_until(key, target, now) is not None

    def cooling(self, now: float) -> list[tuple[Pair, float, bool]]:
        """Each pair cooling right now: the pair, until when, and whether a ban started it."""
        return [
            (pair, state.until, state.from_ban)
            for pair, state in self._pairs.items()
            if state.until > now
        ]

    def active_count(self, now: float) -> int:
        """Pairs cooling right now."""
        return sum(1 for state in self._pairs.values() if state.until > now)

    def clear(self, pair: Pair, now: float) -> bool:
        """Forget one pair (its cooldown and its strikes); True when it was cooling."""
        state = self._pairs.pop(pair, None)
        return state is not None and state.until > now

    def forget_proxy(self, key: ProxyKey) -> None:
        """Drop every pair of a proxy that no longer exists."""
        for pair in [pair for pair in self._pairs if pair[0] == key]:
            del self._pairs[pair]

    def prune(self, now: float) -> None:
        """Free pairs that neither cool nor remember strikes any more."""
        queue = self._forget_queue
        while queue and queue[0][0] <= now:
            _, _, pair = heapq.heappop(queue)
            state = self._pairs.get(pair)
            if state is not None and state.forget_at <= now:
                del self._pairs[pair]

    def _schedule_forget(self, pair: Pair, state: _PairState, forget_at: float) -> None:
        state.forget_at = forget_at
        heapq.heappush(self._forget_queue, (forget_at, next(self._sequence), pair))
