"""The lease store tests' fixtures: virtual time, and a store of each kind (memory, Redis) on it."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from egress_proxies.clock import ManualClock
from tests.discovery.discovery_helpers import virtual_clock
from tests.leases.lease_stores import STORE_KINDS, MakeStore, store_maker


@pytest.fixture
def clock() -> ManualClock:
    return virtual_clock()


@pytest.fixture(params=STORE_KINDS)
async def make_store(
    request: pytest.FixtureRequest, clock: ManualClock
) -> AsyncIterator[MakeStore]:
    async with store_maker(request, clock) as make:
        yield make
