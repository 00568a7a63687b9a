"""The selector index: reused while the catalog's snapshot is unchanged, rebuilt when it changes."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from egress_proxies.catalog import ProxyRecord
from egress_proxies.discovery.index import CatalogIndex, IndexedCatalog
from tests.discovery.discovery_helpers import record
from tests.fakes import ListCatalog

pytestmark = pytest.mark.integration


def names(records: Sequence[ProxyRecord]) -> list[str]:
    return [r.name for r in records]


def test_selectors_match_every_pair() -> None:
    index = CatalogIndex(
        (
            record("b", attributes={"region": "eu", "tier": "gold"}),
            record("a", attributes={"region": "eu"}),
            record("c", attributes={"region": "us", "tier": "gold"}),
        )
    )
    assert names(index.select({}).matching) == ["a", "b", "c"]
    assert names(index.select({"region": "eu"}).matching) == ["a", "b"]
    assert names(index.select({"tier": "gold", "region": "eu"}).matching) == ["b"]
    assert names(index.select({"region": "mars"}).matching) == []
    assert index.select({"region": "eu"}) is index.select({"region": "eu"})


def test_the_index_is_reused_until_the_snapshot_changes() -> None:
    catalog = ListCatalog(record("a"))
    indexed = IndexedCatalog(catalog)
    first = indexed.current()
    assert indexed.current() is first
    catalog.replace(record("a"), record("b"))
    second = indexed.current()
    assert second is not first
    assert names(second.select({}).matching) == ["a", "b"]


class FreshListCatalog:
    """A catalog that builds a new list per call: correct, just re-indexed every time."""

    def __init__(self, *records: ProxyRecord) -> None:
        self.records_ = list(records)

    def records(self) -> Sequence[ProxyRecord]:
        return list(self.records_)


def test_a_catalog_without_stable_snapshots_is_reindexed_every_time() -> None:
    catalog = FreshListCatalog(record("a"))
    indexed = IndexedCatalog(catalog)
    first = indexed.current()
    catalog.records_.append(record("b"))
    assert names(indexed.current().select({}).matching) == ["a", "b"]
    assert indexed.current() is not first
