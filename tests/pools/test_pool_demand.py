"""The pool autoscaler measures demand per {proxy, target} pair from the lease store, and a
restarted controller reading the leases already there decides the same.

Against both stores: memory (the embedded default) and a real redis-server, where a
new store object on the same prefix stands for the restarted operator's.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, cast

import pytest

from egress_proxies.catalog import ProxyKey
from egress_proxies.clock import ManualClock
from egress_proxies.kube import KubeClient
from egress_proxies.leases import LeaseStore, RedisLeaseStore
from egress_proxies.pool_model import template_hash
from egress_proxies.pools import DemandBook, PoolComponents, PoolController
from egress_proxies.vocabulary import TEMPLATE_HASH_LABEL
from tests.discovery.discovery_helpers import record
from tests.leases.lease_stores import MakeStore, granted, pool

pytestmark = pytest.mark.integration

TEMPLATE: dict[str, Any] = {"spec": {"provider": "kubernetes"}}
NAMES = ("p-0", "p-1", "p-2", "p-3")
SITES = ("a.example", "b.example", "c.example")


class Client:
    """Takes every write; keeps the patches in order."""

    def __init__(self) -> None:
        self.patches: list[tuple[str, dict[str, Any]]] = []

    async def patch(self, path: str, body: dict[str, Any], **_: Any) -> dict[str, Any]:
        self.patches.append((path, body))
        return body

    async def create(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        return body

    async def delete(self, path: str, **_: Any) -> None:
        return None

    def scaled_to(self) -> list[int]:
        return [body["spec"]["replicas"] for _, body in self.patches if "spec" in body]

    def demand(self) -> dict[str, int]:
        status = [body["status"] for path, body in self.patches if path.endswith("/status")]
        return cast(dict[str, int], status[-1]["demand"])


class Members:
    def pool_members(self, namespace: str, pool: str) -> list[Mapping[str, Any]]:
        return [
            {
                "metadata": {
                    "name": name,
                    "namespace": "crawl",
                    "creationTimestamp": "2026-12-06T12:00:00Z",
                    "labels": {TEMPLATE_HASH_LABEL: template_hash(TEMPLATE)},
                },
                "spec": {"maxLeases": 1},
                "status": {"phase": "Ready"},
            }
            for name in NAMES
        ]


POOL = {
    "metadata": {"name": "p", "namespace": "crawl", "uid": "u", "generation": 1},
    "spec": {
        "replicas": 4,
        "template": TEMPLATE,
        "autoscale": {"minReplicas": 1, "maxReplicas": 8, "targetUtilizationPercent": 80},
    },
}


async def one_round(store: LeaseStore, clock: ManualClock) -> Client:
    """A round of a controller just started (its own demand book, nothing remembered)."""
    client = Client()

    async def lease_counts() -> Mapping[ProxyKey, Mapping[str | None, int]]:
        return await store.pair_counts()

    controller = PoolController(
        PoolComponents(
            client=cast(KubeClient, client),
            members=Members(),
            lease_counts=lease_counts,
            demand=DemandBook(clock),
            max_lease_seconds=300.0,
            clock=clock,
        )
    )
    await controller.converge(POOL, lambda *_: None)
    return client


async def lease(store: LeaseStore, per_site: int) -> None:
    candidates = pool(*(record(name) for name in NAMES))
    for site in SITES:
        for _ in range(per_site):
            granted(await store.acquire(candidates, site, 300))


def restarted(make_store: MakeStore, store: LeaseStore) -> LeaseStore:
    """The store as a restarted operator opens it: Redis anew on the same prefix (a memory
    store lives in the operator's process: there only the controller is new)."""
    return make_store() if isinstance(store, RedisLeaseStore) else store


async def test_sites_on_half_the_pool_leave_room_and_a_restart_keeps_the_replicas(
    make_store: MakeStore, clock: ManualClock
) -> None:
    store = make_store()
    await lease(store, per_site=2)  # six leases on four proxies of maxLeases 1
    first = await one_round(store, clock)
    demand = {"activeLeases": 6, "capacity": 4, "busiestTargetLeases": 2, "waitingPerMinute": 0}
    assert (first.scaled_to(), first.demand()) == ([], demand)
    again = await one_round(restarted(make_store, store), clock)
    assert (again.scaled_to(), again.demand()) == ([], demand)


async def test_sites_on_every_proxy_scale_up_by_a_step_before_and_after_a_restart(
    make_store: MakeStore, clock: ManualClock
) -> None:
    store = make_store()
    await lease(store, per_site=4)
    first = await one_round(store, clock)
    demand = {"activeLeases": 12, "capacity": 4, "busiestTargetLeases": 4, "waitingPerMinute": 0}
    assert (first.scaled_to(), first.demand()) == ([5], demand)
    again = await one_round(restarted(make_store, store), clock)
    assert (again.scaled_to(), again.demand()) == ([5], demand)
