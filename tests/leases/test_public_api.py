"""The public surfaces of leases/ and discovery/ are exactly what we mean them to be."""

from __future__ import annotations

import pytest

from egress_proxies import discovery, leases

pytestmark = pytest.mark.unit


def test_leases_exports() -> None:
    assert set(leases.__all__) == {
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
        "LeaseId",
        "LeaseCounts",
        "LeaseEnds",
        "LeaseLimits",
        "LeaseStore",
        "MemoryLeaseStore",
        "RecordLookup",
        "RedisLeaseStore",
        "StoreUnavailableError",
        "open_lease_store",
        "redact_url",
        "NoMatch",
        "Pace",
        "PaceLimits",
        "TargetBounds",
        "ReportOutcome",
        "ReportResult",
        "is_offerable",
        "parse_lease_id",
    }
    assert all(hasattr(leases, name) for name in leases.__all__)


def test_discovery_exports() -> None:
    assert set(discovery.__all__) == {
        "DEFAULT_PORT",
        "MAX_BODY_BYTES",
        "InvalidTokenSecretError",
        "LeaseRequestRecorder",
        "TokenSource",
        "create_app",
        "openapi_document",
        "render_openapi",
        "start",
        "tokens_from_secret_data",
    }
    assert all(hasattr(discovery, name) for name in discovery.__all__)
