"""Selector lookups over catalog snapshots, so a request never scans the fleet.

The catalog's snapshot object is the index's version: `records()` returning the
same tuple as last time means nothing changed and the index (with every
selector's ranked CandidatePool) is reused; any other snapshot is indexed anew
(one pass over the fleet). A catalog that builds a fresh sequence per call stays
correct but pays that pass on every request, so the operator's catalog should
keep one tuple and replace it whenever a record changes (copy-on-write).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from egress_proxies.catalog import ProxyCatalog, ProxyKey, ProxyRecord
from egress_proxies.leases import CandidatePool

# Distinct selectors remembered per snapshot; crawlers use a handful, so a full
# cache means abuse and is simply emptied.
MAX_CACHED_SELECTIONS = 1024

SelectorKey = frozenset[tuple[str, str]]


@dataclass(frozen=True)
class Selection:
    """The proxies matching one selector: all of them by key, and the leasing pool."""

    matching: tuple[ProxyRecord, ...]
    pool: CandidatePool


class CatalogIndex:
    """An attribute index over one snapshot, memoising each selector's Selection."""

    def __init__(self, snapshot: Sequence[ProxyRecord]) -> None:
        self.snapshot = snapshot
        self._all = tuple(sorted(snapshot, key=lambda record: record.key))
        postings: dict[tuple[str, str], list[ProxyRecord]] = {}
        for record in self._all:
            for pair in record.attributes.items():
                postings.setdefault(pair, []).append(record)
        self._postings = postings
        self._selections: dict[SelectorKey, Selection] = {}
        self._by_key: dict[ProxyKey, ProxyRecord] | None = None

    def record(self, key: ProxyKey) -> ProxyRecord | None:
        """The snapshot's record of `key`, or None when it has none (a RecordLookup)."""
        if self._by_key is None:
            self._by_key = {record.key: record for record in self._all}
        return self._by_key.get(key)

    def select(self, selector: Mapping[str, str]) -> Selection:
        """The proxies carrying every attribute pair of `selector` (all when empty)."""
        key: SelectorKey = frozenset(selector.items())
        selection = self._selections.get(key)
        if selection is None:
            if len(self._selections) >= MAX_CACHED_SELECTIONS:
                self._selections.clear()
            matching = self._match(key)
            selection = Selection(matching=matching, pool=CandidatePool.of(matching))
            self._selections[key] = selection
        return selection

    def _match(self, key: SelectorKey) -> tuple[ProxyRecord, ...]:
        if not key:
            return self._all
        postings = [self._postings.get(pair) for pair in key]
        if any(posting is None for posting in postings):
            return ()
        shortest = min((posting for posting in postings if posting is not None), key=len)
        return tuple(
            record
            for record in shortest
            if all(record.attributes.get(name) == value for name, value in key)
        )


class IndexedCatalog:
    """A ProxyCatalog seen through a CatalogIndex of its current snapshot."""

    def __init__(self, catalog: ProxyCatalog) -> None:
        self._catalog = catalog
        self._index: CatalogIndex | None = None

    def current(self) -> CatalogIndex:
        """The index of the catalog's snapshot right now, rebuilt only when it changed."""
        snapshot = self._catalog.records()
        index = self._index
        if index is None or not (isinstance(snapshot, tuple) and snapshot is index.snapshot):
            index = self._index = CatalogIndex(snapshot)
        return index
