"""A LeaseStore that tells the console's LeaseBook what passed through it.

Only the operator's (or a tier replica's) own discovery API is wrapped, and
only when the console is on: every call goes to the real store unchanged,
and what it answered is noted in the book afterwards.
"""

from __future__ import annotations

from egress_proxies.catalog import ProxyKey
from egress_proxies.console.leasebook import LeaseBook
from egress_proxies.console.tally import RedisTally
from egress_proxies.discovery.requester import requester
from egress_proxies.leases import (
    CandidatePool,
    Cooling,
    Lease,
    LeaseCounts,
    LeaseEnds,
    LeaseId,
    LeaseStore,
    NoMatch,
    RecordLookup,
    ReportOutcome,
    ReportResult,
)


class ObservedLeaseStore:
    """Delegates to `store`; notes grants, renewals, releases, reports and gone proxies
    (reports also in `tally`, the fleet's counts, where there is one)."""

    def __init__(self, store: LeaseStore, book: LeaseBook, tally: RedisTally | None = None) -> None:
        self._store = store
        self._book = book
        self._tally = tally

    def __repr__(self) -> str:
        return f"<ObservedLeaseStore {self._store!r} {self._book!r}>"

    @property
    def max_ttl(self) -> int:
        """The store's longest lease."""
        return self._store.max_ttl

    async def acquire(
        self, pool: CandidatePool, target: str | None, ttl_seconds: int, held: int = 0
    ) -> Lease | NoMatch:
        """The store's answer; a granted lease is noted with its holder's token name."""
        outcome = await self._store.acquire(pool, target, ttl_seconds, held)
        if isinstance(outcome, Lease):
            self._book.granted(outcome, requester())
            if self._tally is not None:
                self._tally.granted(outcome, requester())
        return outcome

    async def renew(
        self, lease_id: LeaseId, ttl_seconds: int, records: RecordLookup
    ) -> Lease | None:
        """The store's answer; the renewed lease is noted."""
        lease = await self._store.renew(lease_id, ttl_seconds, records)
        if lease is None:
            self._book.released(lease_id)
        else:
            self._book.granted(lease)
        if self._tally is not None:
            if lease is None:
                self._tally.released(lease_id)
            else:
                self._tally.granted(lease)
        return lease

    async def release(self, lease_id: LeaseId) -> ProxyKey | None:
        """End the lease in the store, then in the book."""
        key = await self._store.release(lease_id)
        self._book.released(lease_id)
        if self._tally is not None:
            self._tally.released(lease_id)
        return key

    async def lease_ends(self, key: ProxyKey) -> LeaseEnds:
        """The store's released and renewed leases on the proxy."""
        return await self._store.lease_ends(key)

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
        """The store's answer; an accepted report is noted."""
        outcome = await self._store.report(
            lease_id, result, target, retry_after, records, count, accepted
        )
        if outcome is not None:
            self._book.reported(outcome, result, count)
            if self._tally is not None:
                self._tally.reported(outcome, result, count)
        return outcome

    async def forget_proxy(self, key: ProxyKey) -> None:
        """Forget the proxy in the store, then in the book."""
        await self._store.forget_proxy(key)
        self._book.forgot(key)
        if self._tally is not None:
            self._tally.forgot(key)

    async def cooldowns(self) -> list[Cooling]:
        """The store's cooling pairs."""
        return await self._store.cooldowns()

    async def clear_cooldown(self, key: ProxyKey, target: str | None) -> bool:
        """Clear the pair's cooldown in the store."""
        return await self._store.clear_cooldown(key, target)

    async def active_counts(self) -> dict[ProxyKey, int]:
        """The store's active leases per proxy."""
        return await self._store.active_counts()

    async def pair_counts(self) -> dict[ProxyKey, dict[str | None, int]]:
        """The store's active leases per {proxy, target} pair."""
        return await self._store.pair_counts()

    async def counts(self) -> LeaseCounts:
        """The store's fleet-wide totals."""
        return await self._store.counts()

    def last_counts(self) -> LeaseCounts:
        """The store's last totals."""
        return self._store.last_counts()

    async def ping(self) -> None:
        """Whether the store answers."""
        await self._store.ping()

    async def close(self) -> None:
        """Close the store."""
        await self._store.close()
