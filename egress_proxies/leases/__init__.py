"""The lease and cooldown store behind the discovery API.

A crawler leases the least-loaded healthy proxy matching its selector, releases
it when done, and reports `rate_limited` or `banned` to put the {proxy, target}
pair on cooldown. `ok` counts and rate limits teach the store the pair's pace
(leases/pace.py), which every lease, renewal and report hands out. The state
lives behind the `LeaseStore` Protocol: in this process's memory (the default)
or in Redis (`open_lease_store("redis://...")`).

`RedisLeaseStore` is imported on first use: redis-py (with the OpenTelemetry
SDK and cryptography it imports) costs an operator on the memory store about
6 MiB it would never use.
"""

from typing import TYPE_CHECKING, Any

from egress_proxies.leases.banstorm import (
    DEFAULT_STORM_PAUSE,
    DEFAULT_STORM_SHARE,
    DEFAULT_STORM_WINDOW,
    BanStorms,
)
from egress_proxies.leases.candidates import CandidatePool, is_offerable
from egress_proxies.leases.lease import (
    LEASE_ID_PATTERN,
    Lease,
    LeaseId,
    NoMatch,
    ReportOutcome,
    ReportResult,
    parse_lease_id,
)
from egress_proxies.leases.limits import (
    DEFAULT_BAN_BACKOFF_CAP,
    DEFAULT_COOLDOWN_WINDOW,
    DEFAULT_MAX_TTL,
    DEFAULT_RATE_LIMIT_WINDOW,
    LeaseLimits,
)
from egress_proxies.leases.memory_store import MemoryLeaseStore
from egress_proxies.leases.opening import open_lease_store
from egress_proxies.leases.pace import Pace, PaceLimits, TargetBounds
from egress_proxies.leases.store import (
    MAX_COOLDOWNS_LISTED,
    Cooling,
    InvalidTtlError,
    LeaseCounts,
    LeaseEnds,
    LeaseStore,
    RecordLookup,
    StoreUnavailableError,
)
from egress_proxies.leases.urls import redact_url

if TYPE_CHECKING:
    from egress_proxies.leases.redis_store import RedisLeaseStore

__all__ = [
    "DEFAULT_BAN_BACKOFF_CAP",
    "DEFAULT_COOLDOWN_WINDOW",
    "DEFAULT_MAX_TTL",
    "DEFAULT_RATE_LIMIT_WINDOW",
    "DEFAULT_STORM_PAUSE",
    "DEFAULT_STORM_SHARE",
    "DEFAULT_STORM_WINDOW",
    "LEASE_ID_PATTERN",
    "MAX_COOLDOWNS_LISTED",
    "BanStorms",
    "CandidatePool",
    "Cooling",
    "InvalidTtlError",
    "Lease",
    "LeaseCounts",
    "LeaseEnds",
    "LeaseId",
    "LeaseLimits",
    "LeaseStore",
    "MemoryLeaseStore",
    "NoMatch",
    "Pace",
    "PaceLimits",
    "RecordLookup",
    "RedisLeaseStore",
    "ReportOutcome",
    "ReportResult",
    "StoreUnavailableError",
    "TargetBounds",
    "is_offerable",
    "open_lease_store",
    "parse_lease_id",
    "redact_url",
]


def __getattr__(name: str) -> Any:
    """`RedisLeaseStore`, imported when first asked for."""
    if name == "RedisLeaseStore":
        from egress_proxies.leases.redis_store import RedisLeaseStore  # noqa: PLC0415

        return RedisLeaseStore
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
