"""The lease options `run` and `discovery` share: where leases live and how long they cool.

Both commands take them from these models, so the operator and every tier
replica on one Redis apply the same limits.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, ClassVar

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    TypeAdapter,
    ValidationError,
    field_validator,
    model_validator,
)

from egress_proxies.clock import Clock
from egress_proxies.leases import (
    DEFAULT_BAN_BACKOFF_CAP,
    DEFAULT_COOLDOWN_WINDOW,
    DEFAULT_MAX_TTL,
    DEFAULT_RATE_LIMIT_WINDOW,
    LeaseLimits,
    LeaseStore,
    PaceLimits,
    TargetBounds,
    open_lease_store,
    redact_url,
)
from egress_proxies.leases.opening import DEFAULT_PREFIX, DEFAULT_TIMEOUT, MEMORY, check_store_url
from egress_proxies.leases.pace import DEFAULT_PACE_CEILING, DEFAULT_PACE_FLOOR, DEFAULT_PACE_START
from egress_proxies.settings.options import Options, option, seconds


class LeaseLimitSettings(Options):
    """How long a lease may last, how long a refused proxy cools, how fast a target is asked."""

    title: ClassVar[str] = "lease limits"

    lease_max_ttl: int = option(
        DEFAULT_MAX_TTL,
        "the longest lease a crawler may ask for, in seconds",
        env=seconds("LEASE_MAX_TTL"),
    )
    lease_cooldown: float = option(
        DEFAULT_COOLDOWN_WINDOW,
        "a ban's first cooldown, in seconds, and the longest a rate limit cools",
        env=seconds("LEASE_COOLDOWN"),
    )
    lease_rate_limit_cooldown: float = option(
        DEFAULT_RATE_LIMIT_WINDOW,
        "a rate limit's first cooldown without the site's Retry-After, doubling on repeats "
        "up to --lease-cooldown",
        env=seconds("LEASE_RATE_LIMIT_COOLDOWN"),
    )
    lease_ban_backoff_cap: float = option(
        DEFAULT_BAN_BACKOFF_CAP,
        "the longest cooldown after repeated bans, in seconds (21600 = 6 h)",
        env=seconds("LEASE_BAN_BACKOFF_CAP"),
    )
    lease_pace_start: float = option(
        DEFAULT_PACE_START,
        "requests/s a proxy starts at for a target the fleet knows nothing about",
    )
    lease_pace_floor: float = option(
        DEFAULT_PACE_FLOOR, "the slowest pace rate limits can lower a proxy to, requests/s"
    )
    lease_pace_ceiling: float = option(
        DEFAULT_PACE_CEILING, "the fastest pace accepted requests can raise a proxy to, requests/s"
    )
    lease_target_bounds: str = option(
        "",
        "per-target bounds, a JSON list of {pattern, maxRequestsPerSecond, "
        "maxFleetRequestsPerSecond, maxLeases}; the first matching pattern applies",
    )

    @field_validator("lease_target_bounds")
    @classmethod
    def _parses(cls, value: str) -> str:
        target_bounds_of(value)
        return value

    @model_validator(mode="after")
    def _possible(self) -> LeaseLimitSettings:
        try:
            self.lease_limits()
        except ValueError as error:
            raise ValueError(
                "lease limits (--lease-max-ttl, --lease-cooldown, --lease-ban-backoff-cap, "
                f"--lease-rate-limit-cooldown, --lease-pace-*): {error}"
            ) from None
        return self

    def lease_limits(self) -> LeaseLimits:
        """These limits as the stores take them; ValueError when impossible."""
        return LeaseLimits(
            max_ttl=self.lease_max_ttl,
            cooldown_window=self.lease_cooldown,
            ban_backoff_cap=self.lease_ban_backoff_cap,
            rate_limit_window=self.lease_rate_limit_cooldown,
            pace=self.pace_limits(),
        )

    def pace_limits(self) -> PaceLimits:
        """The pace's floor, ceiling, start and per-target bounds; ValueError when impossible."""
        return PaceLimits(
            start=self.lease_pace_start,
            floor=self.lease_pace_floor,
            ceiling=self.lease_pace_ceiling,
            targets=target_bounds_of(self.lease_target_bounds),
        )


class LeaseStoreSettings(Options):
    """Where leases and cooldowns live."""

    title: ClassVar[str] = "lease store"

    lease_store: str = option(
        MEMORY,
        "where leases and cooldowns live: memory (lost on restart) or a redis://, "
        "rediss:// (TLS) or unix:// URL, with AUTH in it as redis-py reads it",
    )
    lease_store_prefix: str = option(
        DEFAULT_PREFIX, "the Redis key prefix; processes sharing it share leases"
    )
    lease_store_timeout: float = option(
        DEFAULT_TIMEOUT,
        "seconds a Redis call may take before the API answers 503",
        env=seconds("LEASE_STORE_TIMEOUT"),
        gt=0,
    )

    @field_validator("lease_store")
    @classmethod
    def _names_a_store(cls, value: str) -> str:
        check_store_url(value)
        return value

    def __repr_args__(self) -> Iterator[tuple[str | None, Any]]:
        # The lease store URL may carry a Redis password.
        for name, value in super().__repr_args__():
            yield name, redact_url(value) if name == "lease_store" else value


class LeaseSettings(LeaseStoreSettings, LeaseLimitSettings):
    """Where leases live and their limits: all a process needs to open its lease store."""

    def open_store(self, clock: Clock | None = None) -> LeaseStore:
        """The lease store these settings name, with their limits (connects to nothing yet)."""
        return open_lease_store(
            self.lease_store,
            prefix=self.lease_store_prefix,
            timeout=self.lease_store_timeout,
            limits=self.lease_limits(),
            clock=clock,
        )


class _TargetBoundsEntry(BaseModel):
    """One entry of --lease-target-bounds, as users write it."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    pattern: str
    max_requests_per_second: float | None = Field(None, alias="maxRequestsPerSecond")
    max_fleet_requests_per_second: float | None = Field(None, alias="maxFleetRequestsPerSecond")
    max_leases: int | None = Field(None, alias="maxLeases")


_TARGET_BOUNDS = TypeAdapter(list[_TargetBoundsEntry])


def target_bounds_of(text: str) -> tuple[TargetBounds, ...]:
    """The bounds a --lease-target-bounds JSON list declares; ValueError naming the problem."""
    if not text.strip():
        return ()
    try:
        entries = _TARGET_BOUNDS.validate_json(text)
    except ValidationError as error:
        problem = error.errors(include_url=False, include_input=False)[0]
        where = ".".join(str(part) for part in problem["loc"])
        raise ValueError(f"target bounds {where}: {problem['msg']}") from None
    return tuple(
        TargetBounds(
            entry.pattern,
            max_rate_per_proxy=entry.max_requests_per_second,
            max_rate=entry.max_fleet_requests_per_second,
            max_leases=entry.max_leases,
        )
        for entry in entries
    )
