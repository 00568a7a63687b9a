"""The pool controller reads its members' timestamps and writes its own on the one clock."""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from typing import Any, cast

import pytest

from egress_proxies.catalog import ProxyKey, proxy_key
from egress_proxies.clock import ManualClock
from egress_proxies.kube import KubeClient
from egress_proxies.pool_model import template_hash
from egress_proxies.pools import DemandBook, PoolComponents, PoolController
from egress_proxies.vocabulary import DRAINING_ANNOTATION, TEMPLATE_HASH_LABEL

pytestmark = pytest.mark.unit

WALL = datetime.datetime(2026, 12, 4, 12, tzinfo=datetime.UTC)
TEMPLATE: dict[str, Any] = {"spec": {"provider": "kubernetes"}}


class RecordingClient:
    """Takes every write; remembers the patches and deletions."""

    def __init__(self) -> None:
        self.patches: list[tuple[str, dict[str, Any]]] = []
        self.deleted: list[str] = []

    async def patch(self, path: str, body: dict[str, Any], **_: Any) -> dict[str, Any]:
        self.patches.append((path, body))
        return body

    async def delete(self, path: str, **_: Any) -> None:
        self.deleted.append(path)

    async def create(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        return body


class Members:
    def __init__(self, *bodies: Mapping[str, Any]) -> None:
        self.bodies = list(bodies)

    def pool_members(self, namespace: str, pool: str) -> list[Mapping[str, Any]]:
        return self.bodies


def member(name: str, created: str, annotations: Mapping[str, str] | None = None) -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "namespace": "crawl",
            "creationTimestamp": created,
            "labels": {TEMPLATE_HASH_LABEL: template_hash(TEMPLATE)},
            "annotations": dict(annotations or {}),
        },
        "spec": {"maxLeases": 1},
        "status": {"phase": "Ready"},
    }


def pool(replicas: int) -> dict[str, Any]:
    return {
        "metadata": {"name": "p", "namespace": "crawl", "uid": "u", "generation": 1},
        "spec": {"replicas": replicas, "template": TEMPLATE},
    }


async def one_round(
    clock: ManualClock,
    members: Members,
    leases: Mapping[ProxyKey, Mapping[str | None, int]],
    replicas: int,
) -> RecordingClient:
    client = RecordingClient()

    async def lease_counts() -> Mapping[ProxyKey, Mapping[str | None, int]]:
        return leases

    controller = PoolController(
        PoolComponents(
            client=cast(KubeClient, client),
            members=members,
            lease_counts=lease_counts,
            demand=DemandBook(clock),
            max_lease_seconds=3600.0,
            clock=clock,
        )
    )
    await controller.converge(pool(replicas), lambda *_: None)
    return client


async def test_a_drain_is_stamped_with_the_clocks_time_as_kubernetes_writes_it() -> None:
    clock = ManualClock(wall=WALL)
    clock.advance(7.5)
    members = Members(member("a", "2026-12-04T11:00:00Z"), member("b", "2026-12-04T11:30:00Z"))
    client = await one_round(clock, members, {}, replicas=1)
    drained = [
        body["metadata"]["annotations"]
        for path, body in client.patches
        if "metadata" in body and DRAINING_ANNOTATION in body["metadata"]["annotations"]
    ]
    assert drained == [{DRAINING_ANNOTATION: "2026-12-04T12:00:07Z"}]


async def test_a_leased_member_is_deleted_once_it_has_drained_for_the_longest_lease() -> None:
    clock = ManualClock(wall=WALL)
    since = {DRAINING_ANNOTATION: "2026-12-04T11:00:01Z"}
    members = Members(
        member("a", "2026-12-04T10:00:00Z"), member("old", "2026-12-04T10:00:00Z", since)
    )
    leased: dict[ProxyKey, Mapping[str | None, int]] = {proxy_key("crawl", "old"): {"a.example": 1}}
    assert (await one_round(clock, members, leased, replicas=1)).deleted == []
    clock.advance(1)
    assert (await one_round(clock, members, leased, replicas=1)).deleted == [
        "/apis/crawl.example.com/v1alpha1/namespaces/crawl/proxies/old"
    ]
