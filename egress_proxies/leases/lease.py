"""What the store hands out: a lease on one proxy, or the reasons none was free."""

from __future__ import annotations

import binascii
import os
import re
from dataclasses import dataclass, field
from enum import StrEnum
from typing import NewType

from egress_proxies.catalog import ProxyKey, ProxyRecord

LeaseId = NewType("LeaseId", str)

# secrets.token_urlsafe(16): 16 random bytes, 22 URL-safe base64 characters.
LEASE_ID_PATTERN = r"^[A-Za-z0-9_-]{22}$"
_LEASE_ID = re.compile(LEASE_ID_PATTERN)
_URL_SAFE = bytes.maketrans(b"+/", b"-_")


def new_lease_id() -> LeaseId:
    """An unguessable id: holding it is what entitles a client to release or report."""
    # secrets.token_urlsafe(16) without its layers of calls (base64's among them): the
    # same 22 characters of the same 16 random bytes.
    return LeaseId(
        binascii.b2a_base64(os.urandom(16), newline=False)[:22].translate(_URL_SAFE).decode()
    )


def parse_lease_id(text: str) -> LeaseId | None:
    """The id if `text` has the shape the store issues, else None."""
    return LeaseId(text) if _LEASE_ID.fullmatch(text) else None


class ReportResult(StrEnum):
    """What a client saw when it used a leased proxy against a target."""

    OK = "ok"
    RATE_LIMITED = "rate_limited"
    BANNED = "banned"


@dataclass(frozen=True, slots=True)
class Lease:
    """One client's claim on one proxy until `expires_at` (clock seconds)."""

    lease_id: LeaseId
    proxy: ProxyRecord
    target: str | None
    ttl_seconds: int
    expires_at: float
    # The selector's offerable proxies when the lease was granted, for the ban-storm guard.
    pool_keys: frozenset[ProxyKey] = field(default=frozenset(), repr=False, compare=False)
    pool_size: int = field(default=0, repr=False, compare=False)


@dataclass(frozen=True)
class NoMatch:
    """Why no lease was granted. Additive: considered = at_capacity + in_cooldown + unhealthy.

    Each considered proxy is counted once, under the first reason that applies, in
    the order unhealthy (not offerable), at capacity, in cooldown; while the target
    is paused every offerable proxy not at capacity counts as in cooldown.
    `retry_after` is how many seconds until the earliest of them may free up (a lease
    expiry, a cooldown or the pause ending); None when none is healthy.
    """

    considered: int
    at_capacity: int
    in_cooldown: int
    unhealthy: int
    retry_after: float | None = None
    target_paused: bool = False


@dataclass(frozen=True)
class ReportOutcome:
    """A report the store accepted: the lease it was about, the resolved target, and
    the end of the target's pause when this report started one."""

    lease: Lease
    target: str | None
    paused_until: float | None = None
