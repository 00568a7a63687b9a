"""A pool round never acts on a partial view, and a create or delete is never repeated."""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from typing import Any, cast

import pytest

from egress_proxies.catalog import ProxyKey
from egress_proxies.clock import ManualClock
from egress_proxies.kube import KubeApiError, KubeClient, TransportError
from egress_proxies.pool_model import DRAINING_ANNOTATION
from egress_proxies.pools import DemandBook, PoolComponents, PoolController

WALL = datetime.datetime(2026, 12, 6, 12, tzinfo=datetime.UTC)
TEMPLATE: dict[str, Any] = {"spec": {"provider": "kubernetes"}}


class Server:
    """Creates and deletes as told; `fail_next` makes the next create fail (after or before)."""

    def __init__(self) -> None:
        self.created: list[str] = []
        self.delete_calls: list[str] = []
        self.fail_next: tuple[Exception, bool] | None = None  # (error, made before failing)
        self.patches = 0

    async def create(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        if self.fail_next is not None:
            error, made = self.fail_next
            self.fail_next = None
            if made:
                self.created.append(body["metadata"]["name"])
            raise error
        self.created.append(body["metadata"]["name"])
        return body

    async def delete(self, path: str, **_: Any) -> None:
        self.delete_calls.append(path.rsplit("/", 1)[-1])
        # None: KubeClient.delete's answer when the object is gone already

    async def patch(self, path: str, body: dict[str, Any], **_: Any) -> dict[str, Any]:
        self.patches += 1
        return body


class View:
    """The members the watch shows (`bodies`) and whether it is synced."""

    def __init__(self) -> None:
        self.bodies: list[Mapping[str, Any]] = []
        self.synced = False

    def pool_members(self, namespace: str, pool: str) -> list[Mapping[str, Any]]:
        return self.bodies


def pool(replicas: int) -> dict[str, Any]:
    return {
        "metadata": {"name": "p", "namespace": "crawl", "uid": "u", "generation": 1},
        "spec": {"replicas": replicas, "template": TEMPLATE},
    }


def controller(server: Server, view: View, clock: ManualClock) -> PoolController:
    async def no_leases() -> Mapping[ProxyKey, int]:
        return {}

    return PoolController(
        PoolComponents(
            client=cast(KubeClient, server),
            members=view,
            lease_counts=no_leases,
            demand=DemandBook(clock),
            max_lease_seconds=60.0,
            clock=clock,
            synced=lambda: view.synced,
        )
    )


async def test_a_round_before_the_watch_is_synced_does_nothing_at_all() -> None:
    server, view, clock = Server(), View(), ManualClock(wall=WALL)
    pools = controller(server, view, clock)

    await pools.converge(pool(3), lambda *_: None)

    assert (server.created, server.patches, pools.rounds) == ([], 0, 0)
    view.synced = True
    await pools.converge(pool(3), lambda *_: None)
    assert len(server.created) == 3 and pools.rounds == 1


@pytest.mark.parametrize(
    "error",
    [TransportError("connection reset"), KubeApiError(504, "Timeout", "the server timed out")],
    ids=["transport", "504"],
)
async def test_a_create_whose_answer_was_lost_is_counted_and_not_repeated(
    error: Exception,
) -> None:
    server, view, clock = Server(), View(), ManualClock(wall=WALL)
    view.synced = True
    pools = controller(server, view, clock)
    server.fail_next = (error, True)

    with pytest.raises(type(error)):
        await pools.converge(pool(1), lambda *_: None)
    await pools.converge(pool(1), lambda *_: None)  # the watch has not shown it yet

    assert len(server.created) == 1


async def test_a_create_the_server_refused_is_not_counted() -> None:
    server, view, clock = Server(), View(), ManualClock(wall=WALL)
    view.synced = True
    pools = controller(server, view, clock)
    server.fail_next = (KubeApiError(422, "Invalid", "spec.provider: bad"), False)

    with pytest.raises(KubeApiError):
        await pools.converge(pool(1), lambda *_: None)
    await pools.converge(pool(1), lambda *_: None)

    assert len(server.created) == 1


async def test_a_member_already_gone_is_deleted_once_and_announced_never() -> None:
    server, view, clock = Server(), View(), ManualClock(wall=WALL)
    view.synced = True
    view.bodies = [
        {
            "metadata": {
                "name": "p-old",
                "namespace": "crawl",
                "creationTimestamp": "2026-12-06T10:00:00Z",
                "annotations": {DRAINING_ANNOTATION: "2026-12-06T11:00:00Z"},
                "labels": {},
            },
            "spec": {},
            "status": {"phase": "Ready"},
        }
    ]
    pools = controller(server, view, clock)
    events: list[str] = []

    await pools.converge(pool(0), lambda _type, reason, _msg: events.append(reason))
    await pools.converge(pool(0), lambda _type, reason, _msg: events.append(reason))

    assert server.delete_calls == ["p-old"]
    assert "Deleted" not in events
