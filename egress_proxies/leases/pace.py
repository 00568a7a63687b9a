"""The pace: how many requests per second a proxy may send to a target, learned from reports.

AIMD, as TCP learns a link's capacity. Every `ok` report adds `increase` requests/s
per second of traffic it counts at the current pace (`count / rate` seconds), so
a pace that the site keeps accepting grows by `increase` each second; a
`rate_limited` report multiplies it by `decrease`. Rate limits reported within
`settle` seconds of a decrease (or within the site's Retry-After, if longer) are
echoes of the same overload, from requests already in flight: they lower it no
further, and nothing raises it until that hold is over. The learned pace stays
within [floor, ceiling], and below a target's per-proxy bound.

The target's own pace is where a proxy new to the target starts: the last pace a
proxy was lowered to, or raised to beyond it. The pace handed to a holder is the
learned one shared by the holders of the pair, and by the target's fleet-wide
bound shared by every lease on the target. Pure bookkeeping over plain values:
the memory store keeps its states in `Paces`, the Redis store the same in Lua.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from typing import TypeVar

from egress_proxies.catalog import ProxyKey

DEFAULT_PACE_START = 1.0
DEFAULT_PACE_FLOOR = 0.1
DEFAULT_PACE_CEILING = 50.0
DEFAULT_PACE_INCREASE = 0.5
DEFAULT_PACE_DECREASE = 0.7
DEFAULT_PACE_SETTLE = 1.0
# One request at a time: sites count their limit over a sliding second, and a bucket
# holding b tokens at rate r lets b + r requests into one second (measured: a burst of
# one second's worth, at R = 5 per address, had 9.7 % of a crawl's answers 429).
BURST = 1
# A pace nobody reported on for a day is forgotten; the target's start applies again.
DEFAULT_PACE_MEMORY = 86400.0


@dataclass(frozen=True)
class TargetBounds:
    """What a user allows for the targets matching `pattern` (a glob, e.g. `*.example.com`).

    `max_rate_per_proxy`: requests/s through one proxy; `max_rate`: requests/s of the
    whole fleet, shared by the target's leases; `max_leases`: leases at once. None: no bound.
    """

    pattern: str
    max_rate_per_proxy: float | None = None
    max_rate: float | None = None
    max_leases: int | None = None

    def __post_init__(self) -> None:
        if not self.pattern:
            raise ValueError("a target pattern must not be empty")
        for name in ("max_rate_per_proxy", "max_rate", "max_leases"):
            value = getattr(self, name)
            if value is not None and not 0 < value < math.inf:
                raise ValueError(f"{name} of {self.pattern!r} must be positive")

    def matches(self, target: str) -> bool:
        """True when `target` matches the pattern (case-sensitive, as hosts are sent)."""
        return fnmatchcase(target, self.pattern)


UNBOUNDED = TargetBounds("*")


@dataclass(frozen=True)
class PaceLimits:
    """The AIMD parameters and the per-target bounds (first matching pattern wins)."""

    start: float = DEFAULT_PACE_START
    floor: float = DEFAULT_PACE_FLOOR
    ceiling: float = DEFAULT_PACE_CEILING
    increase: float = DEFAULT_PACE_INCREASE
    decrease: float = DEFAULT_PACE_DECREASE
    settle: float = DEFAULT_PACE_SETTLE
    memory: float = DEFAULT_PACE_MEMORY
    targets: tuple[TargetBounds, ...] = ()

    def __post_init__(self) -> None:
        if not 0 < self.floor <= self.start <= self.ceiling < math.inf:
            raise ValueError("the pace needs 0 < floor <= start <= ceiling")
        if not 0 < self.decrease < 1 or self.increase <= 0:
            raise ValueError("the pace decrease must be in (0, 1) and its increase positive")
        if self.settle < 0 or self.memory <= 0:
            raise ValueError("the pace settle time must not be negative, its memory positive")

    def bounds_for(self, target: str | None) -> TargetBounds:
        """The bounds of the first pattern `target` matches; none for no target."""
        if target is not None:
            for bounds in self.targets:
                if bounds.matches(target):
                    return bounds
        return UNBOUNDED

    def cap_for(self, bounds: TargetBounds) -> float:
        """The highest pace a proxy may learn for a target with these bounds."""
        per_proxy = bounds.max_rate_per_proxy
        return self.ceiling if per_proxy is None else min(self.ceiling, per_proxy)


@dataclass(frozen=True, slots=True)
class Pace:
    """What a lease holder may send: `rate` requests/s, up to `burst` at once after a pause.

    `lowered_at`: when the learned pace was last lowered (clock seconds), None if never.
    """

    rate: float
    burst: int
    lowered_at: float | None


@dataclass(slots=True)
class PaceState:
    """A learned pace: its rate, when it was last lowered, and until when it holds still."""

    rate: float
    lowered_at: float | None = None
    hold_until: float = 0.0


def raised(state: PaceState, count: int, now: float, limits: PaceLimits, cap: float) -> bool:
    """Apply `count` accepted requests; True when the pace changed."""
    if now < state.hold_until or state.rate >= cap:
        return False
    state.rate = min(cap, state.rate + limits.increase * count / state.rate)
    return True


def lowered(state: PaceState, now: float, retry_after: float | None, limits: PaceLimits) -> bool:
    """Apply one rate limit; True when the pace changed (False within a hold)."""
    if now < state.hold_until:
        return False
    state.rate = max(limits.floor, state.rate * limits.decrease)
    state.lowered_at = now
    state.hold_until = now + max(limits.settle, retry_after or 0.0)
    return True


def handed_out(
    learned: PaceState,
    bounds: TargetBounds,
    pair_holders: int,
    target_leases: int,
    cap: float,
) -> Pace:
    """The pace one holder gets: the learned pace within the bounds, shared by its co-holders."""
    rate = min(learned.rate, cap) / max(pair_holders, 1)
    if bounds.max_rate is not None:
        rate = min(rate, bounds.max_rate / max(target_leases, 1))
    return _shared_pace(rate, learned.lowered_at)


@functools.lru_cache(maxsize=4096)
def _shared_pace(rate: float, lowered_at: float | None) -> Pace:
    # A lease keeps its pace while active and a cooldown window after it ends, and
    # most leases of a target carry the same one: equal paces share one object.
    return Pace(rate=rate, burst=BURST, lowered_at=lowered_at)


_Name = TypeVar("_Name")


@dataclass
class _Remembered:
    state: PaceState
    touched_at: float


@dataclass
class Paces:
    """The learned paces of {proxy, target} pairs and of targets, in one process.

    Forgotten `limits.memory` seconds after the last report on them. Not locked on its
    own: the LeaseStore's lock guards every call.
    """

    limits: PaceLimits
    _pairs: dict[tuple[ProxyKey, str | None], _Remembered] = field(default_factory=dict)
    _targets: dict[str, _Remembered] = field(default_factory=dict)
    _next_prune: float = math.inf

    def learned(self, key: ProxyKey, target: str | None) -> PaceState:
        """The pair's pace, else where a proxy new to the target starts."""
        remembered = self._pairs.get((key, target))
        if remembered is not None:
            return remembered.state
        start = self._targets.get(target) if target is not None else None
        return PaceState(start.state.rate if start is not None else self.limits.start)

    def record(
        self,
        key: ProxyKey,
        target: str | None,
        *,
        now: float,
        ok: int = 0,
        rate_limited: bool = False,
        retry_after: float | None = None,
    ) -> PaceState:
        """Apply a report about the pair; return its pace after it."""
        state = self.learned(key, target)
        bounds = self.limits.bounds_for(target)
        if rate_limited:
            changed = lowered(state, now, retry_after, self.limits)
        else:
            changed = raised(state, ok, now, self.limits, self.limits.cap_for(bounds))
        self._touch(self._pairs, (key, target), state, now)
        if changed and target is not None:
            self._follow(target, state, now, went_down=rate_limited)
        return state

    def forget_proxy(self, key: ProxyKey) -> None:
        """Drop every pair of a proxy that no longer exists."""
        for pair in [pair for pair in self._pairs if pair[0] == key]:
            del self._pairs[pair]

    def prune(self, now: float) -> None:
        """Forget paces nobody reported on for `limits.memory` seconds."""
        if now < self._next_prune:
            return  # every store operation asks: most find nothing due
        horizon = now - self.limits.memory
        _forget_before(self._pairs, horizon)
        _forget_before(self._targets, horizon)
        oldest = [
            next(iter(remembered.values())).touched_at
            for remembered in (self._pairs, self._targets)
            if remembered
        ]
        self._next_prune = min(oldest) + self.limits.memory if oldest else math.inf

    def __len__(self) -> int:
        return len(self._pairs)

    def _follow(self, target: str, pair: PaceState, now: float, *, went_down: bool) -> None:
        entry = self._targets.get(target)
        state = entry.state if entry is not None else PaceState(pair.rate)
        if (pair.rate < state.rate) if went_down else (pair.rate > state.rate):
            state.rate = pair.rate
        self._touch(self._targets, target, state, now)

    def _touch(
        self, remembered: dict[_Name, _Remembered], name: _Name, state: PaceState, now: float
    ) -> None:
        remembered.pop(name, None)
        remembered[name] = _Remembered(state, now)
        self._next_prune = min(self._next_prune, now + self.limits.memory)


def _forget_before(remembered: dict[_Name, _Remembered], horizon: float) -> None:
    # Touching re-inserts, so the dict is ordered by when each entry was last touched.
    stale = []
    for name, entry in remembered.items():
        if entry.touched_at > horizon:
            break
        stale.append(name)
    for name in stale:
        del remembered[name]
