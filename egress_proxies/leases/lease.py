"""What the store hands out: a lease on one proxy, or the reasons none was free."""

from __future__ import annotations

import binascii
import os
import re
from dataclasses import dataclass, field
from enum import StrEnum
from typing import NewType

from egress_proxies.catalog import ProxyKey, ProxyRecord
from egress_proxies.leases.pace import Pace

LeaseId = NewType("LeaseId", str)

# 22 URL-safe base64 characters: the shape of secrets.token_urlsafe(16).
LEASE_ID_PATTERN = r"^[A-Za-z0-9_-]{22}$"
_LEASE_ID = re.compile(LEASE_ID_PATTERN)
_URL_SAFE = bytes.maketrans(b"+/", b"-_")
_ID_BATCH = 256  # ids made at once; an even number
_unused_ids: list[LeaseId] = []  # pop and extend are atomic: threads may share it
# A forked child must not hand out the ids its parent will.
os.register_at_fork(after_in_child=_unused_ids.clear)


def new_lease_id() -> LeaseId:
    """An unguessable id: holding it is what entitles a client to release or report."""
    try:
        return _unused_ids.pop()
    except IndexError:
        _unused_ids.extend(_fresh_ids())
        return _unused_ids.pop()


def _fresh_ids() -> list[LeaseId]:
    """A batch of ids from one read of the OS's random source (os.urandom, as `secrets`).

    Every 33 random bytes are 44 URL-safe base64 characters, two ids of 22: each id
    carries 132 random bits, as many characters as secrets.token_urlsafe(16) gives
    (whose last character carries only 2 of its 6 bits). One read and one encoding
    per batch instead of per lease.
    """
    text = binascii.b2a_base64(os.urandom(33 * _ID_BATCH // 2), newline=False)
    encoded = text.translate(_URL_SAFE).decode()
    return [LeaseId(encoded[start : start + 22]) for start in range(0, len(encoded), 22)]


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
    """One client's claim on one proxy until `expires_at` (clock seconds), at `pace`.

    `pace` is the one handed out when the lease was granted or last renewed.
    """

    lease_id: LeaseId
    proxy: ProxyRecord
    target: str | None
    ttl_seconds: int
    expires_at: float
    # The selector's offerable proxies when the lease was granted, for the ban-storm guard.
    pool_keys: frozenset[ProxyKey] = field(default=frozenset(), repr=False, compare=False)
    pool_size: int = field(default=0, repr=False, compare=False)
    pace: Pace | None = field(default=None, compare=False)


@dataclass(frozen=True)
class NoMatch:
    """Why no lease was granted. Additive: considered = at_capacity + in_cooldown + unhealthy.

    Each considered proxy is counted once, under the first reason that applies, in
    the order unhealthy (not offerable), at capacity, in cooldown; while the target
    is paused every offerable proxy not at capacity counts as in cooldown, and while
    it holds as many leases as its bounds allow (`target_full`) every offerable proxy
    counts as at capacity. `retry_after` is how many seconds until the earliest of
    them may free up (a lease expiry, a cooldown or the pause ending); None when none
    is healthy.
    """

    considered: int
    at_capacity: int
    in_cooldown: int
    unhealthy: int
    retry_after: float | None = None
    target_paused: bool = False
    target_full: bool = False


@dataclass(frozen=True)
class ReportOutcome:
    """A report the store accepted: the lease it was about, the resolved target, the
    end of the target's pause when this report started one, and the pace after it."""

    lease: Lease
    target: str | None
    paused_until: float | None = None
    pace: Pace | None = None
