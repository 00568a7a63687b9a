"""The lease and cooldown store behind the discovery API (seed section 7).

A crawler leases the least-loaded healthy proxy matching its selector, releases
it when done, and reports `rate_limited` or `banned` to put the {proxy, target}
pair on cooldown. Everything lives in one process's memory behind one lock.
"""

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
from egress_proxies.leases.store import (
    DEFAULT_BAN_BACKOFF_CAP,
    DEFAULT_COOLDOWN_WINDOW,
    DEFAULT_MAX_TTL,
    DEFAULT_RATE_LIMIT_WINDOW,
    Clock,
    InvalidTtlError,
    LeaseStore,
)

__all__ = [
    "DEFAULT_BAN_BACKOFF_CAP",
    "DEFAULT_COOLDOWN_WINDOW",
    "DEFAULT_MAX_TTL",
    "DEFAULT_RATE_LIMIT_WINDOW",
    "DEFAULT_STORM_PAUSE",
    "DEFAULT_STORM_SHARE",
    "DEFAULT_STORM_WINDOW",
    "LEASE_ID_PATTERN",
    "BanStorms",
    "CandidatePool",
    "Clock",
    "InvalidTtlError",
    "Lease",
    "LeaseId",
    "LeaseStore",
    "NoMatch",
    "ReportOutcome",
    "ReportResult",
    "is_offerable",
    "parse_lease_id",
]
