"""The watch layer's "synced": set by a list, cleared by a failed watch until the relist."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

import pytest

from egress_proxies.catalog.fleet import Fleet
from egress_proxies.catalog.sinks import ProxySink
from egress_proxies.kube.client import JsonObject
from egress_proxies.kube.reflector import Reflector
from egress_proxies.kube.watches import Watches

pytestmark = pytest.mark.unit


def proxy(name: str, namespace: str = "crawl", shard: str = "a") -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": f"uid-{namespace}-{name}",
            "labels": {"shard": shard},
        },
        "spec": {},
        "status": {},
    }


class ScriptedServer:
    """Lists what `items` holds; each watch waits for `release`, then fails with 410 Gone."""

    def __init__(self, items: Sequence[dict[str, Any]]) -> None:
        self.items = list(items)
        self.lists = 0
        self.list_gate = asyncio.Event()
        self.list_gate.set()
        self.release = asyncio.Event()
        self.listing = asyncio.Event()  # a list has been asked for

    async def request(
        self,
        method: str,
        path: str,
        *,
        body: JsonObject | None = None,
        params: Mapping[str, str] | None = None,
        content_type: str = "application/json",
    ) -> JsonObject:
        self.listing.set()
        await self.list_gate.wait()
        self.lists += 1
        return {"metadata": {"resourceVersion": str(self.lists)}, "items": list(self.items)}

    async def watch(
        self, path: str, *, resource_version: str, timeout_seconds: int = 300
    ) -> AsyncIterator[dict[str, Any]]:
        await self.release.wait()
        self.release.clear()
        yield {"type": "ERROR", "object": {"code": 410, "reason": "Expired", "message": "old"}}


async def test_synced_is_cleared_by_a_410_and_set_again_only_once_the_relist_is_applied() -> None:
    server = ScriptedServer([proxy("p1")])
    fleet = Fleet()
    watches = Watches({"proxies": [Reflector(server, "/proxies", ProxySink(fleet))]})
    assert not watches.synced() and watches.unsynced() == ["proxies"]
    task = asyncio.create_task(watches.run())
    try:
        await asyncio.wait_for(watches.wait_synced(), 5)
        assert [b["metadata"]["name"] for b in fleet.proxies()] == ["p1"]

        server.list_gate.clear()  # the relist will wait: the window a decision must not use
        server.listing.clear()
        server.items.append(proxy("p2"))
        server.release.set()
        await asyncio.wait_for(server.listing.wait(), 5)  # the 410 came; the relist waits
        assert not watches.synced("proxies")
        assert "unsynced: proxies" in repr(watches)

        server.list_gate.set()
        await asyncio.wait_for(watches.wait_synced("proxies"), 5)
        assert sorted(b["metadata"]["name"] for b in fleet.proxies()) == ["p1", "p2"]
        assert server.lists == 2
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def test_a_resource_is_synced_only_when_every_reflector_feeding_it_is() -> None:
    listed, waiting = ScriptedServer([]), ScriptedServer([])
    waiting.list_gate.clear()
    fleet = Fleet()
    watches = Watches(
        {
            "proxies": [Reflector(listed, "/a", ProxySink(fleet, namespace="a"))],
            "secrets": [Reflector(waiting, "/b", ProxySink(fleet, namespace="b"))],
        }
    )
    task = asyncio.create_task(watches.run())
    try:
        await asyncio.wait_for(watches.wait_synced("proxies"), 5)
        assert watches.synced("proxies")
        assert not watches.synced("secrets") and not watches.synced()
        assert watches.unsynced() == ["secrets"]
        waiting.list_gate.set()
        await asyncio.wait_for(watches.wait_synced(), 5)
        assert watches.synced() and repr(watches).startswith("<Watches [synced]")
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


def test_a_shards_sink_keeps_only_what_it_selects_and_forgets_a_proxy_moved_away() -> None:
    fleet = Fleet()
    sink = ProxySink(fleet, selects=lambda labels: labels.get("shard") == "a")
    sink.replace([proxy("mine"), proxy("theirs", shard="b")])
    assert [b["metadata"]["name"] for b in fleet.proxies()] == ["mine"]

    sink.put(proxy("mine", shard="b"))

    assert fleet.proxies() == []


def test_a_namespaced_sinks_relist_forgets_only_its_own_namespaces_proxies() -> None:
    fleet = Fleet()
    first, second = ProxySink(fleet, namespace="one"), ProxySink(fleet, namespace="two")
    first.replace([proxy("a", "one")])
    second.replace([proxy("b", "two")])

    first.replace([])

    assert [b["metadata"]["namespace"] for b in fleet.proxies()] == ["two"]


def test_a_resources_version_is_the_lowest_of_its_reflectors_once_each_has_one() -> None:
    server = ScriptedServer([])
    first = Reflector(server, "/a", ProxySink(Fleet()))
    second = Reflector(server, "/b", ProxySink(Fleet()))
    watches = Watches({"proxies": [first, second]})
    assert watches.version("proxies") is None
    first.resource_version, second.resource_version = "120", "97"
    assert watches.version("proxies") == 97
    second.resource_version = "opaque"
    assert watches.version("proxies") is None
