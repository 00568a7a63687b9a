"""The proxies a lease may be granted on, ranked the way the store prefers them."""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cached_property

from egress_proxies.catalog import ProxyKey, ProxyRecord


def is_offerable(record: ProxyRecord) -> bool:
    """Only proxies probed healthy, not being deleted, draining or cordoned are ever leased.

    A proxy not yet probed (`healthy is None`) is not offered: nobody has seen it work.
    """
    return (
        record.healthy is True
        and not record.deleting
        and not record.draining
        and not record.cordoned
    )


def _rank(record: ProxyRecord) -> tuple[float, str]:
    latency = math.inf if record.latency_millis is None else record.latency_millis
    return latency, record.key


@dataclass(frozen=True)
class CandidatePool:
    """The proxies matching one selector: the offerable ones ranked, and how many were not.

    `ranked` is ordered by latency (unknown last), then key (`namespace/name`): the
    store's tie-breakers after "fewest active leases". Build a pool once per catalog
    snapshot and selector, not per request: ranking sorts, acquiring only walks.
    """

    ranked: tuple[ProxyRecord, ...]
    not_offerable: int

    @classmethod
    def of(cls, records: Iterable[ProxyRecord]) -> CandidatePool:
        """Partition matching records into ranked offerable ones and a count of the rest."""
        offerable: list[ProxyRecord] = []
        not_offerable = 0
        for record in records:
            if is_offerable(record):
                offerable.append(record)
            else:
                not_offerable += 1
        offerable.sort(key=_rank)
        return cls(ranked=tuple(offerable), not_offerable=not_offerable)

    @cached_property
    def considered(self) -> int:
        """Every proxy that matched the selector, offerable or not (one int, kept by each lease)."""
        return len(self.ranked) + self.not_offerable

    @cached_property
    def ranked_keys(self) -> tuple[ProxyKey, ...]:
        """The offerable proxies' keys, in rank order."""
        return tuple(record.key for record in self.ranked)

    @cached_property
    def pools(self) -> frozenset[str]:
        """The ProxyPools (`namespace/name`) the offerable proxies belong to."""
        return frozenset(record.pool for record in self.ranked if record.pool)

    @cached_property
    def keys(self) -> frozenset[ProxyKey]:
        """The offerable proxies' keys."""
        return frozenset(record.key for record in self.ranked)
