"""Joining the peering object before kopf starts, on the real API server: replicas that join
at the same moment are ranked by the order the API server took their writes, whatever their
clocks say, and a replica that restarts under its name comes back below the one at work."""

from __future__ import annotations

import asyncio
import datetime
from typing import Any

import pytest

from egress_proxies.clock import ManualClock
from egress_proxies.kube import KubeClient
from egress_proxies.operator.peering import Peering, sweep_blocker

pytestmark = pytest.mark.integration

NAME = "egress-proxies"


class WriteOrder:
    """The real client; remembers whose keep-alive write the API server took, and at which
    resourceVersion (etcd's revision: the order it took them in)."""

    def __init__(self, client: KubeClient, landed: list[tuple[int, str]]) -> None:
        self._client = client
        self._landed = landed

    async def get(self, path: str) -> dict[str, Any]:
        return await self._client.get(path)

    async def create(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        return await self._client.create(path, body)

    async def patch(self, path: str, body: dict[str, Any], **_: Any) -> dict[str, Any]:
        answer = await self._client.patch(path, body)
        (identity,) = body["status"]
        self._landed.append((int(answer["metadata"]["resourceVersion"]), identity))
        return answer


def replica(
    kube: KubeClient,
    namespace: str,
    identity: str,
    landed: list[tuple[int, str]],
    skew: float = 0.0,
) -> Peering:
    """A replica ranked by arrival, its clock `skew` seconds off (its priority base moves)."""
    wall = datetime.datetime.now(datetime.UTC) + datetime.timedelta(seconds=skew)
    return Peering(
        WriteOrder(kube, landed),  # type: ignore[arg-type]
        NAME,
        0,
        identity,
        (namespace,),
        ManualClock(wall=wall),
        by_arrival=True,
        lifetime=60,
    )


async def test_replicas_joining_together_rank_in_the_order_their_writes_landed(
    kube: KubeClient, namespace: str
) -> None:
    landed: list[tuple[int, str]] = []
    # The later a replica's clock, the higher a rank by start alone would put it: skewed
    # against the order of construction, so only the conditional write can order them.
    replicas = [replica(kube, namespace, f"r{n}", landed, skew=n * 2.0) for n in range(4)]
    await replicas[0].ensure()
    await asyncio.gather(*(r.join() for r in replicas))
    priorities = {r.identity: r.priority for r in replicas}
    order = [identity for _, identity in sorted(landed)]
    assert sorted(order) == ["r0", "r1", "r2", "r3"]
    ranked = [priorities[identity] for identity in order]
    assert ranked == sorted(ranked, reverse=True), f"written {order}, ranked {priorities}"
    assert len(set(ranked)) == 4, "equal priorities would pause both"
    peers = await replicas[0].peers()
    assert {p.identity: p.priority for p in peers} == priorities
    now = datetime.datetime.now(datetime.UTC)
    working = [
        r.identity for r in replicas if not sweep_blocker(peers, r.identity, r.priority, now)
    ]
    assert working == [order[0]], "the first to land works, every later one stands by"


async def test_a_replica_restarted_under_its_name_comes_back_below_the_one_that_took_over(
    kube: KubeClient, namespace: str
) -> None:
    landed: list[tuple[int, str]] = []
    first = replica(kube, namespace, "pod-a", landed)
    await first.ensure()
    await first.join()
    second = replica(kube, namespace, "pod-b", landed)
    await second.join()
    assert second.priority < first.priority
    # pod-a's container is SIGKILLed: its keep-alive stays until it expires, and pod-b (the
    # standby) takes over once it has. It restarts under the same name before that, with a
    # clock that would rank it first by start time.
    restarted = replica(kube, namespace, "pod-a", landed, skew=-30.0)
    await restarted.join()
    assert restarted.priority < second.priority
    peers = await second.peers()
    assert {p.identity for p in peers} == {"pod-a", "pod-b"}, "one entry per name"
    now = datetime.datetime.now(datetime.UTC)
    assert sweep_blocker(peers, "pod-b", second.priority, now) is None
    assert "pod-b has a higher priority" in str(
        sweep_blocker(peers, "pod-a", restarted.priority, now)
    )
