"""The pace: how many requests per second a proxy may send to a target, learned from reports.

Learned per {proxy, target} pair from `ok` counts (accepted requests) and rate
limits, in three regimes, much as TCP CUBIC learns a link's capacity:

- Slow start: a pair that never hit a limit quadruples its pace per second of
  traffic the site accepted (`count / rate` seconds), so it finds a site's limit
  in a few seconds wherever it is.
- A remembered limit: a rate limit remembers the pace the site allowed as the
  pair's limit, and lowers the pace by `decrease`, at least to `cruise` x the
  limit. The holder counts what the site allowed: the requests it accepted in
  the second before it refused one (a report's `accepted`); the pace then drops
  to `cruise` x that count, or by `CONVERGE` when it was already there (a probe's
  overshoot costs no climb back, nor does a refusal of requests the network
  bunched together). A count one short of the remembered limit keeps the limit
  (none, at a limit of 1/s): the holder counts responses, the site arrivals, so a
  count may come one late. A report without
  that count (an older client) leaves the server to estimate it: the pace the
  site saw over the last second (the pace before the last change, then the
  current one, weighted by time: a limit hit right after a doubling came at
  little more than the pace before it). Rate limits within `settle` seconds of a decrease (or
  within the site's Retry-After, if longer) are echoes of the same overload,
  from requests already in flight: they lower it no further, and nothing raises
  it until that hold is over. Then the pace doubles per second of traffic back
  up to `cruise` x the limit, and cruises there.
- Probing: `probe_after` seconds after the last decrease, and no sooner than
  `PROBE_REQUESTS` requests at the limit, the pace grows above the limit again by
  `increase` (a share of itself) per second of traffic, until a rate limit sets a
  new limit; so a site that raised its limit is found again. A probe costs about
  one rate limit and the site's Retry-After, so counting requests keeps its share
  of a slow site's answers as small as of a fast one's (at 1/s a probe every 30 s
  was one answer in 30). A rate limit while cruising (before the probe) says the
  limit is lower than remembered: an estimated limit is then set below the pace
  seen (`CONVERGE` of it), so a site that halved its limit is found in a few
  decreases.
- The fleet learns once: a pair still in slow start when another proxy has found
  the target's limit takes that limit and goes to the cruise below it at its next
  report, instead of overshooting it on its own or climbing to it; a pair new to
  the target starts at that cruise. One pair of a target explores at a time:
  while one raises the target's pace into the unknown (within the last
  `EXPLORING` seconds), the target's other pairs in slow start go to the most the
  site has accepted from one of them, and no higher, measured as the requests `ok`
  reports count over about a second or more (reports closer together add up), and
  a pair new to the target starts there. So the pairs that start together on a
  site pay one rate limit to find its limit, not one each (at 1 request/s that
  was one answer in 40 per proxy). One pair probes for a target at a time too:
  while one raises the target's pace above the cruise below its limit, the
  others due to probe follow it one step behind (its pace before its last raise,
  which the site accepted); once its probe settled they take the target's next
  probe time, its limit when higher, and the cruise below the limit. So a probe
  costs the target one rate limit, not one per proxy, and a raised limit is
  found as fast as when each pair probed.

The learned pace stays within [floor, ceiling], and below a target's per-proxy
bound. The target's own pace (the last pace a proxy was lowered to, or raised to
beyond it) is where a proxy new to the target starts while the target's limit is
unknown and nobody explores it.
The pace handed to a holder is the learned one shared by the holders of the
pair, and by the target's fleet-wide bound shared by every lease on the target.
Pure bookkeeping over plain values: the memory store keeps its states in
`Paces`, the Redis store the same in Lua.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from typing import TypeVar

from egress_proxies.catalog import ProxyKey

# Below the slowest limit sites commonly set (1/s): a pace at a site's limit is refused on
# a new connection's second request, as the first arrives late by the connection's setup.
DEFAULT_PACE_START = 0.5
DEFAULT_PACE_FLOOR = 0.1
DEFAULT_PACE_CEILING = 50.0
DEFAULT_PACE_INCREASE = 0.05
DEFAULT_PACE_DECREASE = 0.7
DEFAULT_PACE_SETTLE = 1.0
# Cruise a little below the remembered limit: a site counting a sliding second refuses
# a pace just at its limit whenever the network bunches two requests together.
DEFAULT_PACE_CRUISE = 0.95
# A limit holds this long after the last decrease before the pace probes above it: long
# enough that probing costs little (one rate limit per pair per probe), short enough
# that a site that restored its limit is back at full pace within a minute.
DEFAULT_PACE_PROBE_AFTER = 30.0
# ...and no sooner than this many requests at the limit: one probe's rate limit is then
# at most about 1 % of a pair's answers, however slow the site.
PROBE_REQUESTS = 100.0
# Slow start quadruples the pace per second of traffic: a limit of 20/s is found in about
# 2.5 s from the start, where doubling took 5.5 s, a tenth of a minute's crawl of a fast
# site (BBR's startup grows its rate 2.89 times per round trip). The cost: when refused,
# the explorer may send up to 4 x the limit for the requests in flight (its pace x the
# round trip), once per target since one pair explores at a time.
SLOW_START_GROWTH = 4.0
# The climb back to the cruise doubles it (the cruise bounds it).
GROWTH = 2.0
# A target whose pace a pair in slow start raised within this many seconds is being
# explored: its other pairs trail what the site accepted (a stopped explorer frees them).
EXPLORING = 2.0
# A limit hit while cruising is set this far below the pace the site saw.
CONVERGE = 0.9
# Sites count their limits over a second: the pace they saw is the last second's.
SITE_WINDOW = 1.0
# What a site accepted is measured over reports spanning this long or more: a second, less
# the jitter of report times (clients report every second; one in two came a little early).
MEASURED_OVER = 0.9
_MOST_SECONDS = 64.0  # of traffic in one report (its count may be huge; the ceiling applies)
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
    """How the pace is learned (see the module) and the per-target bounds (first matching
    pattern wins). `increase`: the probe's growth, a share of the pace per second of
    traffic; `decrease`: the factor a rate limit lowers it by at least."""

    start: float = DEFAULT_PACE_START
    floor: float = DEFAULT_PACE_FLOOR
    ceiling: float = DEFAULT_PACE_CEILING
    increase: float = DEFAULT_PACE_INCREASE
    decrease: float = DEFAULT_PACE_DECREASE
    settle: float = DEFAULT_PACE_SETTLE
    cruise: float = DEFAULT_PACE_CRUISE
    probe_after: float = DEFAULT_PACE_PROBE_AFTER
    memory: float = DEFAULT_PACE_MEMORY
    targets: tuple[TargetBounds, ...] = ()

    def __post_init__(self) -> None:
        if not 0 < self.floor <= self.start <= self.ceiling < math.inf:
            raise ValueError("the pace needs 0 < floor <= start <= ceiling")
        if not 0 < self.decrease < 1 or self.increase <= 0:
            raise ValueError("the pace decrease must be in (0, 1) and its increase positive")
        if self.settle < 0 or self.memory <= 0:
            raise ValueError("the pace settle time must not be negative, its memory positive")
        if not 0 < self.cruise <= 1 or self.probe_after < 0:
            raise ValueError("the pace cruise must be in (0, 1], its probe time not negative")

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
    `waiting_held`: the leases held for the target by a crawler refused one lately
    (leases/waiting.py), None when nobody waits.
    """

    rate: float
    burst: int
    lowered_at: float | None
    waiting_held: int | None = None


@dataclass(slots=True)
class PaceState:
    """A learned pace: its rate, when it was last lowered, until when it holds still, the
    limit the site's last rate limit came at (None: never limited, slow start), when it
    may probe above it, and when the rate last changed from what (`before`). A pair in
    slow start counts the requests the site accepted (`counted`) since `counted_from`
    (None: not counting); a target's state keeps the most requests/s its pairs in slow
    start were measured to have had accepted (`accepted`)."""

    rate: float
    lowered_at: float | None = None
    hold_until: float = 0.0
    limit: float | None = None
    probe_at: float = 0.0
    changed_at: float = 0.0
    before: float | None = None
    accepted: float = 0.0
    counted: int = 0
    counted_from: float | None = None

    def seen(self, now: float) -> float:
        """The pace the site saw over the last second: `before`, then `rate` since the change."""
        if self.before is None:
            return self.rate
        share = min(max(now - self.changed_at, 0.0) / SITE_WINDOW, 1.0)
        return self.before + share * (self.rate - self.before)

    def change(self, rate: float, now: float) -> None:
        """Move to `rate` from now."""
        self.before, self.changed_at, self.rate = self.rate, now, rate


def raised(
    state: PaceState,
    count: int,
    now: float,
    limits: PaceLimits,
    cap: float,
    trail: float | None = None,
    follow: float | None = None,
) -> bool:
    """Apply `count` accepted requests (`trail`: where slow start goes behind another
    pair's exploring, see `trailing`; `follow`: where a pair due to probe goes while
    another pair probes, see `following`); True when the pace changed."""
    if now < state.hold_until or state.rate >= cap:
        return False
    seconds = min(count / state.rate, _MOST_SECONDS)
    if state.limit is None:
        rate = state.rate * SLOW_START_GROWTH**seconds if trail is None else trail
    elif state.rate < (cruise := limits.cruise * state.limit):
        rate = min(cruise, state.rate * GROWTH**seconds)
    elif now >= state.probe_at:
        rate = state.rate * (1 + limits.increase) ** seconds if follow is None else follow
    else:
        return False
    rate = min(cap, rate)
    if rate == state.rate:
        return False
    state.change(rate, now)
    return True


def lowered(
    state: PaceState,
    now: float,
    retry_after: float | None,
    limits: PaceLimits,
    accepted: int | None = None,
) -> bool:
    """Apply one rate limit (`accepted`: what the site accepted from the holder in the
    second before, if it counted); True when the pace changed (False within a hold)."""
    if now < state.hold_until:
        return False
    # A count one short of the remembered limit is that limit counted a little late (the
    # holder counts responses, the site arrivals): the limit stays. At a limit of 1/s the
    # count one short is none: a 1/s site refuses a request that came a little early.
    known = state.limit
    short = accepted is not None and known is not None and known - 1 <= accepted < known
    if accepted is not None and (accepted >= 1 or short):
        # The site's limit as counted: the pace goes to the cruise below it at once (a
        # probe's overshoot costs no climb back), and a refusal while already there
        # (requests bunched on the way) lowers it by CONVERGE, not by `decrease`.
        state.limit = known if short and known is not None else float(accepted)
        lower = min(limits.cruise * state.limit, state.rate * CONVERGE)
    else:
        cruising = state.limit is not None and now < state.probe_at
        state.limit = state.seen(now) * (CONVERGE if cruising else 1.0)
        lower = min(state.rate * limits.decrease, limits.cruise * state.limit)
    state.change(max(limits.floor, lower), now)
    state.lowered_at = now
    state.hold_until = now + max(limits.settle, retry_after or 0.0)
    state.probe_at = now + probe_wait(state.limit, limits)
    return True


def probe_wait(limit: float, limits: PaceLimits) -> float:
    """Seconds from a decrease to the probe above `limit`: `probe_after`, and at least
    PROBE_REQUESTS requests' worth at the limit."""
    return max(limits.probe_after, PROBE_REQUESTS / limit)


def measured(state: PaceState, ok: int, now: float) -> float:
    """What the site accepted from a pair in slow start, in requests/s, over MEASURED_OVER
    seconds or more up to now (0.0: not that long yet). Reports closer together add up."""
    if state.counted_from is None:
        state.counted, state.counted_from = 0, now  # the first report's span is unknown
        return 0.0
    state.counted += ok
    span = now - state.counted_from
    if span < MEASURED_OVER:
        return 0.0
    rate = state.counted / span
    state.counted, state.counted_from = 0, now
    return rate


def exploring(fleet: PaceState, now: float) -> bool:
    """True while a pair in slow start raises the target's pace (`fleet`) into the unknown."""
    return fleet.limit is None and now - fleet.changed_at < EXPLORING


def trailing(state: PaceState, fleet: PaceState, now: float) -> float | None:
    """Where a pair in slow start goes while another pair explores the target above it:
    the most the site was measured to accept from one of the target's pairs (each
    address is limited alike), and no higher. None: the pair explores itself."""
    if state.limit is not None or not exploring(fleet, now) or state.rate >= fleet.rate:
        return None
    return max(state.rate, fleet.accepted)


def following(state: PaceState, fleet: PaceState, now: float, limits: PaceLimits) -> float | None:
    """Where a pair due to probe goes while another pair probes the target (raised the
    target's pace, `fleet`, above the cruise below the target's limit within the last
    EXPLORING seconds, above this pair's): the prober's pace before its last raise, which
    the site accepted, and no higher. None: nobody else probes (the pair probes itself)."""
    probing = (
        fleet.limit is not None
        and fleet.rate > limits.cruise * fleet.limit
        and now - fleet.changed_at < EXPLORING
        and state.rate < fleet.rate
    )
    if not probing:
        return None
    return max(state.rate, fleet.before or state.rate)


def adopted(state: PaceState, fleet: PaceState, now: float, limits: PaceLimits) -> None:
    """A pair takes what the fleet found for its target. In slow start: the limit, and the
    cruise below it, down from above or up from below at once (the site accepted the limit
    from another address, and it limits each address alike). Once its own probe is due:
    a probe another pair settled since (the target's next probe time is later than now):
    its next probe time, its limit when higher, and the cruise below the limit (from
    wherever following the prober took the pair)."""
    if fleet.limit is None:
        return
    if state.limit is None:
        state.limit, state.probe_at = fleet.limit, fleet.probe_at
    elif now >= state.probe_at and fleet.probe_at > now:
        state.probe_at, state.limit = fleet.probe_at, max(state.limit, fleet.limit)
    else:
        return
    if state.rate != (cruise := max(limits.floor, limits.cruise * state.limit)):
        state.change(cruise, now)


def handed_out(
    learned: PaceState,
    bounds: TargetBounds,
    pair_holders: int,
    target_leases: int,
    cap: float,
    waiting_held: int | None = None,
) -> Pace:
    """The pace one holder gets: the learned pace within the bounds, shared by its co-holders,
    and whether a crawler waits for the target."""
    rate = min(learned.rate, cap) / max(pair_holders, 1)
    if bounds.max_rate is not None:
        rate = min(rate, bounds.max_rate / max(target_leases, 1))
    return _shared_pace(rate, learned.lowered_at, waiting_held)


@functools.lru_cache(maxsize=4096)
def _shared_pace(rate: float, lowered_at: float | None, waiting_held: int | None) -> Pace:
    # A lease keeps its pace while active and a cooldown window after it ends, and
    # most leases of a target carry the same one: equal paces share one object.
    return Pace(rate=rate, burst=BURST, lowered_at=lowered_at, waiting_held=waiting_held)


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

    def learned(self, key: ProxyKey, target: str | None, now: float) -> PaceState:
        """The pair's pace, else where a proxy new to the target starts (behind its
        explorer, if one is at it)."""
        remembered = self._pairs.get((key, target))
        if remembered is not None:
            return remembered.state
        start = self._targets.get(target) if target is not None else None
        if start is None:
            return PaceState(self.limits.start)
        known = start.state
        rate = known.rate
        if known.limit is not None:
            rate = max(self.limits.floor, self.limits.cruise * known.limit)
        elif exploring(known, now):
            rate = min(rate, max(self.limits.start, known.accepted))
        return PaceState(rate, limit=known.limit, probe_at=known.probe_at)

    def record(
        self,
        key: ProxyKey,
        target: str | None,
        *,
        now: float,
        ok: int = 0,
        rate_limited: bool = False,
        retry_after: float | None = None,
        accepted: int | None = None,
    ) -> PaceState:
        """Apply a report about the pair; return its pace after it."""
        state = self.learned(key, target, now)
        accepted_rate = 0.0  # in slow start: what the site accepted over the last second+
        if rate_limited or state.limit is not None:
            state.counted, state.counted_from = 0, None
        else:
            accepted_rate = measured(state, ok, now)
        bounds = self.limits.bounds_for(target)
        fleet = self._targets.get(target) if target is not None else None
        trail = follow = None
        if fleet is not None:
            adopted(state, fleet.state, now, self.limits)
            trail = trailing(state, fleet.state, now)
            follow = following(state, fleet.state, now, self.limits)
        if rate_limited:
            changed = lowered(state, now, retry_after, self.limits, accepted)
        else:
            cap = self.limits.cap_for(bounds)
            changed = raised(state, ok, now, self.limits, cap, trail, follow)
        self._touch(self._pairs, (key, target), state, now)
        if target is None:
            return state
        if changed:
            self._follow(target, state, now, went_down=rate_limited, measured=accepted_rate)
        elif fleet is not None and accepted_rate > fleet.state.accepted:
            fleet.state.accepted = accepted_rate  # held behind the explorer: measured only
            self._touch(self._targets, target, fleet.state, now)
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

    def _follow(
        self, target: str, pair: PaceState, now: float, *, went_down: bool, measured: float
    ) -> None:
        entry = self._targets.get(target)
        state = entry.state if entry is not None else PaceState(pair.rate, changed_at=now)
        if (pair.rate < state.rate) if went_down else (pair.rate > state.rate):
            state.change(pair.rate, now)
        state.accepted = max(state.accepted, measured)
        if went_down:
            state.limit, state.probe_at = pair.limit, pair.probe_at
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
