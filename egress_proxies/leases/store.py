"""The lease store interface: what the discovery API asks of wherever leases live.

Two implementations: `MemoryLeaseStore` (one process, the embedded default) and
`RedisLeaseStore` (shared by any number of API processes, survives restarts).
`open_lease_store` picks one from a URL. Both keep the same semantics, proven by
one parametrised suite (tests/leases/test_lease_store.py).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from egress_proxies.catalog import ProxyKey, ProxyRecord
from egress_proxies.errors import EgressProxiesError
from egress_proxies.leases.candidates import CandidatePool
from egress_proxies.leases.lease import Lease, LeaseId, NoMatch, ReportOutcome, ReportResult

# The current record of a proxy, or None once it is gone (the catalog's view).
RecordLookup = Callable[[ProxyKey], ProxyRecord | None]


class InvalidTtlError(ValueError, EgressProxiesError):
    """A TTL outside 1..max_ttl seconds: refused, never clamped."""


class StoreUnavailableError(EgressProxiesError):
    """The store did not answer within its timeout (or refused the connection).

    Nothing was changed that the caller can observe: the API answers 503 and the
    client retries after `retry_after` seconds.
    """

    def __init__(self, detail: str, retry_after: int = 1) -> None:
        super().__init__(detail)
        self.detail = detail
        self.retry_after = retry_after


@dataclass(frozen=True)
class LeaseCounts:
    """Fleet-wide totals for the gauges: active leases, cooling pairs, paused targets."""

    leases: int = 0
    cooldowns: int = 0
    paused_targets: int = 0


@dataclass(frozen=True)
class Cooling:
    """A {proxy, target} pair cooling now (target None: every target), until when, and why."""

    proxy: ProxyKey
    target: str | None
    until: float
    from_ban: bool


# The most cooling pairs one `cooldowns()` call lists (the earliest to end first).
MAX_COOLDOWNS_LISTED = 10_000


@dataclass(frozen=True)
class LeaseEnds:
    """A proxy's leases that end otherwise than their credentials say (leases/credentials.py).

    `revoked`: released within the last max ttl (credentials last at most that long);
    `renewed`: active leases renewed, by id, with their current end (a client that kept
    the credentials of an earlier grant may use them until then).
    """

    revoked: tuple[LeaseId, ...] = ()
    renewed: Mapping[LeaseId, float] = field(default_factory=dict)


class LeaseStore(Protocol):
    """Leases and cooldowns for the whole fleet.

    Selection among a pool's offerable proxies with room for the target
    (leases/capacity.py): fewest active leases for the target, then in all, then
    latency, then key; a proxy without room or cooling for the target (or globally)
    is skipped; a paused target, or one holding as many leases as its bounds allow,
    gets nothing. Every lease, renewal and report carries the pace
    learned for its {proxy, target} pair (leases/pace.py). Every method may raise
    StoreUnavailableError; none blocks longer than the store's timeout.
    """

    @property
    def max_ttl(self) -> int:
        """The longest lease, in seconds, a client may ask for."""
        ...

    async def acquire(
        self, pool: CandidatePool, target: str | None, ttl_seconds: int, held: int = 0
    ) -> Lease | NoMatch:
        """Lease the best free proxy of the pool for `target`, or say why none is free.

        `held`: the leases the requester already holds for the target. A refusal tells
        the target's holders that it waits (leases/waiting.py).
        """
        ...

    async def renew(
        self, lease_id: LeaseId, ttl_seconds: int, records: RecordLookup
    ) -> Lease | None:
        """Extend an active lease to end `ttl_seconds` from now; None once it has ended."""
        ...

    async def release(self, lease_id: LeaseId) -> ProxyKey | None:
        """End a lease now and revoke it on its proxy; the proxy, or None when the lease
        was unknown, expired or released already (idempotent)."""
        ...

    async def lease_ends(self, key: ProxyKey) -> LeaseEnds:
        """The proxy's leases that end otherwise than their credentials say: what the
        proxy's revocation list names."""
        ...

    async def report(
        self,
        lease_id: LeaseId,
        result: ReportResult,
        target: str | None,
        retry_after: float | None,
        records: RecordLookup,
        count: int = 1,
        accepted: int | None = None,
    ) -> ReportOutcome | None:
        """Record what the holder saw; None when the lease is unknown (or ended too long ago).

        The cooldown's target is the report's, else the lease's, else global.
        `retry_after` (the site's Retry-After on a rate limit) sets that cooldown and
        holds the lowered pace; an `ok` report counts `count` requests, raising it.
        `accepted` (on a rate limit): the requests the site accepted from the holder
        in the second before, which sets the pair's limit (None: estimated).
        The outcome carries the holder's pace after the report.
        """
        ...

    async def forget_proxy(self, key: ProxyKey) -> None:
        """The proxy is gone: end its leases (late reports included) and drop its cooldowns."""
        ...

    async def cooldowns(self) -> list[Cooling]:
        """The pairs cooling now, the soonest to end first (at most MAX_COOLDOWNS_LISTED)."""
        ...

    async def clear_cooldown(self, key: ProxyKey, target: str | None) -> bool:
        """End the pair's cooldown now and forget its strikes; True when it was cooling.

        `target` None clears the proxy's global cooldown (a ban reported without a
        target), not its per-target ones. The next acquire may grant the pair at once.
        """
        ...

    async def active_counts(self) -> dict[ProxyKey, int]:
        """Active leases per proxy, for proxies holding at least one."""
        ...

    async def pair_counts(self) -> dict[ProxyKey, dict[str | None, int]]:
        """Active leases per {proxy, target} pair (target None: leases without one),
        for proxies holding at least one: what a pool's autoscaler measures."""
        ...

    async def counts(self) -> LeaseCounts:
        """The fleet-wide totals now (and remembered for `last_counts`)."""
        ...

    def last_counts(self) -> LeaseCounts:
        """Totals for a synchronous reader (a scrape): exact in memory, else the last read."""
        ...

    async def ping(self) -> None:
        """Return when the store answers; raise StoreUnavailableError when it does not."""
        ...

    async def close(self) -> None:
        """Let go of connections (the store's state stays where it lives)."""
        ...
