"""The limits every lease store enforces: longest lease, cooldown windows, ban storms."""

from __future__ import annotations

from dataclasses import dataclass, field

from egress_proxies.leases.banstorm import (
    DEFAULT_STORM_PAUSE,
    DEFAULT_STORM_SHARE,
    DEFAULT_STORM_WINDOW,
)
from egress_proxies.leases.pace import PaceLimits

DEFAULT_COOLDOWN_WINDOW = 300.0
DEFAULT_MAX_TTL = 3600
DEFAULT_BAN_BACKOFF_CAP = 6 * 3600.0
# Rate limits clear in seconds, not minutes: see docs/api.md, "Rate limits are not bans".
DEFAULT_RATE_LIMIT_WINDOW = 30.0


@dataclass(frozen=True)
class LeaseLimits:
    """Capacity-independent limits shared by both stores; ValueError when impossible.

    `cooldown_window` is the first ban's cooldown (and how long an ended lease still
    takes reports), `ban_backoff_cap` the longest one; `rate_limit_window` the first
    rate limit's. A target pauses for `storm_pause` when, within `storm_window`, more
    than `storm_share` of a pool (and at least two proxies) was banned by it.
    `pace`: how paces are learned and bounded per target.
    """

    max_ttl: int = DEFAULT_MAX_TTL
    cooldown_window: float = DEFAULT_COOLDOWN_WINDOW
    ban_backoff_cap: float = DEFAULT_BAN_BACKOFF_CAP
    rate_limit_window: float = DEFAULT_RATE_LIMIT_WINDOW
    storm_share: float = DEFAULT_STORM_SHARE
    storm_window: float = DEFAULT_STORM_WINDOW
    storm_pause: float = DEFAULT_STORM_PAUSE
    pace: PaceLimits = field(default_factory=PaceLimits)

    def __post_init__(self) -> None:
        if self.cooldown_window <= 0 or self.max_ttl < 1 or self.rate_limit_window <= 0:
            raise ValueError("cooldown_window, rate_limit_window and max_ttl must be positive")
        if self.ban_backoff_cap < self.cooldown_window:
            raise ValueError("ban_backoff_cap must be at least cooldown_window")
        if not 0 < self.storm_share <= 1 or self.storm_window <= 0 or self.storm_pause <= 0:
            raise ValueError("storm share must be in (0, 1], window and pause positive")
