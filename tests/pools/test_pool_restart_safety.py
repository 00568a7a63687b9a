"""A pool round never acts on a partial view, and a create or delete is never repeated."""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from typing import Any, cast

import pytest

from egress_proxies.catalog import ProxyKey
from egress_proxies.clock import ManualClock
from egress_proxies.kube import KubeApiError, KubeClient, TransportError
from egress_proxies.pool_model import template_hash
from egress_proxies.pools import DemandBook, PoolComponents, PoolController
from egress_proxies.vocabulary import DRAINING_ANNOTATION, TEMPLATE_HASH_LABEL

pytestmark = pytest.mark.unit

WALL = datetime.datetime(2026, 12, 6, 12, tzinfo=datetime.UTC)
TEMPLATE: dict[str, Any] = {"spec": {"provider": "kubernetes"}}


class Server:
    """Creates and deletes as told; `fail_next` makes the next create fail (after or before)."""

    def __init__(self) -> None:
        self.created: list[str] = []
        self.delete_calls: list[str] = []
        self.fail_next: tuple[Exception, bool] | None = None  # (error, made before failing)
        self.patches = 0
        self.version = 100  # the server's resourceVersion
        self.writes: list[tuple[str, str]] = []  # (verb, object name), in order

    async def create(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        self.version += 1
        body = {**body, "metadata": {**body["metadata"], "resourceVersion": str(self.version)}}
        if self.fail_next is not None:
            error, made = self.fail_next
            self.fail_next = None
            if made:
                self.created.append(body["metadata"]["name"])
            raise error
        self.created.append(body["metadata"]["name"])
        self.writes.append(("create", body["metadata"]["name"]))
        return body

    async def delete(self, path: str, **_: Any) -> None:
        self.delete_calls.append(path.rsplit("/", 1)[-1])
        # None: KubeClient.delete's answer when the object is gone already

    async def patch(self, path: str, body: dict[str, Any], **_: Any) -> dict[str, Any]:
        self.patches += 1
        self.writes.append(("patch", path.rsplit("/", 1)[-1]))
        return body


class View:
    """The members the watch shows (`bodies`) and whether it is synced."""

    def __init__(self) -> None:
        self.bodies: list[Mapping[str, Any]] = []
        self.synced = False
        self.version: int | None = None  # what the watch has seen up to

    def pool_members(self, namespace: str, pool: str) -> list[Mapping[str, Any]]:
        return self.bodies


def pool(replicas: int) -> dict[str, Any]:
    return {
        "metadata": {"name": "p", "namespace": "crawl", "uid": "u", "generation": 1},
        "spec": {"replicas": replicas, "template": TEMPLATE},
    }


def controller(server: Server, view: View, clock: ManualClock) -> PoolController:
    async def no_leases() -> Mapping[ProxyKey, Mapping[str | None, int]]:
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
            watched_version=lambda: view.version,
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


async def test_a_member_deleted_before_the_watch_showed_it_is_replaced_once_it_passed() -> None:
    server, view, clock = Server(), View(), ManualClock(wall=WALL)
    view.synced = True
    pools = controller(server, view, clock)
    await pools.converge(pool(1), lambda *_: None)
    assert len(server.created) == 1

    view.version = 100  # the watch is behind the create (101): it is still counted
    await pools.converge(pool(1), lambda *_: None)
    assert len(server.created) == 1

    view.version = 105  # the watch passed it and never showed it: deleted meanwhile
    await pools.converge(pool(1), lambda *_: None)
    assert len(server.created) == 2


def ready_member(name: str, template_hash: str) -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "namespace": "crawl",
            "creationTimestamp": "2026-12-06T10:00:00Z",
            "labels": {TEMPLATE_HASH_LABEL: template_hash},
        },
        "spec": {},
        "status": {"phase": "Ready"},
    }


async def test_a_round_that_replaces_a_member_drains_it_before_creating_its_successor() -> None:
    """Those in service never exceed replicas + maxSurge, not even between two writes."""
    server, view, clock = Server(), View(), ManualClock(wall=WALL)
    view.synced = True
    fresh = template_hash(TEMPLATE)
    view.bodies = [ready_member(f"old-{n}", "stale") for n in range(3)]
    view.bodies.append(ready_member("surge", fresh))
    pools = controller(server, view, clock)

    await pools.converge(pool(3), lambda *_: None)

    verbs = [verb for verb, name in server.writes if verb == "create" or name.startswith("old-")]
    assert verbs == ["patch", "create"], server.writes
