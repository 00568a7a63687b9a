"""The replica that starts work rings every unsettled Proxy: when, and which (no I/O)."""

from __future__ import annotations

import datetime
from typing import Any

import pytest

from egress_proxies.catalog.fleet import Fleet
from egress_proxies.clock import ManualClock
from egress_proxies.kube import TransportError
from egress_proxies.operator.peering import Peer
from egress_proxies.operator.takeover import Takeover
from tests.proxies.test_standby import proxy

pytestmark = pytest.mark.unit

ME = "op@host-a/1"


class Peers:
    """The peering object as a test sets it."""

    identity = ME
    priority = 10

    def __init__(self, clock: ManualClock) -> None:
        self.clock = clock
        self.entries: dict[str, Peer] = {}
        self.fail = False
        self.renew(ME, 10)

    def renew(self, identity: str, priority: int, seconds: float = 30) -> None:
        deadline = self.clock.utcnow() + datetime.timedelta(seconds=seconds)
        self.entries[identity] = Peer(identity, priority, deadline)

    async def peers(self) -> list[Peer]:
        if self.fail:
            raise TransportError("connection refused")
        return list(self.entries.values())


class World:
    def __init__(self) -> None:
        self.clock = ManualClock()
        self.peers = Peers(self.clock)
        self.fleet = Fleet()
        self.synced = True
        self.rung: list[tuple[str, str]] = []
        self.forgotten = 0
        self.ring_fails = False
        self.takeover = Takeover(
            self.peers, self.fleet, lambda: self.synced, self.ring, self.forget, self.clock
        )

    async def ring(self, namespace: str, name: str, value: str) -> None:
        if self.ring_fails:
            raise TransportError("connection reset")
        assert value.startswith(ME)
        self.rung.append((namespace, name))

    async def forget(self) -> None:
        self.forgotten += 1

    def put(self, *bodies: dict[str, Any]) -> None:
        for body in bodies:
            self.fleet.put_proxy(
                {
                    **body,
                    "spec": {},
                    "metadata": {**body["metadata"], "uid": body["metadata"]["name"]},
                }
            )


@pytest.fixture
def world() -> World:
    w = World()
    w.put(proxy("settled"), proxy("new", provisioned=None), proxy("retrying", ("False", "X")))
    return w


async def test_starting_work_rings_the_unsettled_proxies_once(world: World) -> None:
    assert await world.takeover.round() == [("ns", "new"), ("ns", "retrying")]
    assert world.forgotten == 1, "the status this replica wrote may be stale: read it again"
    assert await world.takeover.round() == [], "nothing new: nothing rung"
    assert world.rung == [("ns", "new"), ("ns", "retrying")]


async def test_a_standby_rings_nothing_until_the_active_is_gone(world: World) -> None:
    world.peers.renew("op@host-b/1", 20, seconds=15)
    assert await world.takeover.round() == []
    world.clock.advance(16)  # its keep-alive expired (a SIGKILL)
    world.peers.renew(ME, 10)
    assert await world.takeover.round() == [("ns", "new"), ("ns", "retrying")]
    assert repr(world.takeover) == "<Takeover [at work | takeovers: 1 | rung: 2]>"


async def test_nothing_is_rung_on_a_partial_view(world: World) -> None:
    world.synced = False
    assert await world.takeover.round() == []
    world.synced = True
    assert await world.takeover.round() == [("ns", "new"), ("ns", "retrying")]


async def test_a_peer_that_joins_while_it_works_makes_it_look_again(world: World) -> None:
    await world.takeover.round()
    world.put(proxy("handled-by-the-newcomer", provisioned=None))
    world.peers.renew("op@host-b/2", 5)  # lower: it may have worked before it saw us
    assert await world.takeover.round() == [
        ("ns", "handled-by-the-newcomer"),
        ("ns", "new"),
        ("ns", "retrying"),
    ]
    assert await world.takeover.round() == []


async def test_after_a_pause_it_takes_over_again(world: World) -> None:
    await world.takeover.round()
    world.peers.renew("op@host-c/1", 99)
    assert await world.takeover.round() == []
    del world.peers.entries["op@host-c/1"]  # a clean exit removes its keep-alive
    assert await world.takeover.round() == [("ns", "new"), ("ns", "retrying")]
    assert world.forgotten == 2


async def test_a_failed_read_or_ring_is_tried_again_next_round(world: World) -> None:
    world.peers.fail = True
    assert await world.takeover.round() == []
    world.peers.fail = False
    world.ring_fails = True
    assert await world.takeover.round() == []
    world.ring_fails = False
    assert await world.takeover.round() == [("ns", "new"), ("ns", "retrying")]
