"""Who among several operators may sweep: kopf's pausing rule, read from the peering status."""

from __future__ import annotations

import datetime
from typing import Any

import pytest

from egress_proxies.clock import ManualClock
from egress_proxies.kube import TransportError
from egress_proxies.operator.peering import (
    CachedGate,
    Peer,
    Peering,
    arrival_priority,
    parse_peers,
    peer_identity,
    peering_paths,
    priority_by_start,
    sweep_blocker,
)

pytestmark = pytest.mark.unit

NOW = datetime.datetime(2026, 11, 29, 12, 0, tzinfo=datetime.UTC)
ME = "me@host/1/ab"


def peer(identity: str, priority: int = 0, seconds_left: float = 30) -> Peer:
    return Peer(identity, priority, NOW + datetime.timedelta(seconds=seconds_left))


def test_alone_it_sweeps() -> None:
    assert sweep_blocker([peer(ME)], ME, 0, NOW) is None


def test_a_lower_priority_or_dead_peer_does_not_stop_it() -> None:
    peers = [peer(ME, 5), peer("low", 4), peer("dead-high", 9, seconds_left=-1)]
    assert sweep_blocker(peers, ME, 5, NOW) is None


def test_a_live_higher_priority_peer_sweeps_instead() -> None:
    reason = sweep_blocker([peer(ME, 0), peer("other", 3)], ME, 0, NOW)
    assert reason is not None
    assert "other has a higher priority (3 > 0)" in reason


def test_the_same_priority_pauses_both_as_kopf_does() -> None:
    for me_first in (True, False):
        peers = [peer(ME, 1), peer("twin", 1)]
        reason = sweep_blocker(peers if me_first else peers[::-1], ME, 1, NOW)
        assert reason is not None
        assert "twin runs with the same priority (1)" in reason


def test_without_its_own_live_keepalive_it_waits() -> None:
    assert "no live keep-alive" in str(sweep_blocker([], ME, 0, NOW))
    assert "no live keep-alive" in str(sweep_blocker([peer(ME, seconds_left=-5)], ME, 0, NOW))


def test_kopf_status_entries_parse_and_junk_is_ignored() -> None:
    status = {
        ME: {"priority": 2, "lifetime": 60, "lastseen": "2026-11-29T11:59:30+00:00"},
        "naive": {"priority": 0, "lifetime": 10, "lastseen": "2026-11-29T11:59:00"},
        "removed": None,
        "garbled": {"priority": "high", "lastseen": "yesterday"},
    }
    peers = {p.identity: p for p in parse_peers(status)}
    assert set(peers) == {ME, "naive"}
    assert peers[ME].priority == 2
    assert peers[ME].deadline == datetime.datetime(2026, 11, 29, 12, 0, 30, tzinfo=datetime.UTC)
    assert peers["naive"].deadline < NOW


def test_cluster_wide_uses_one_cluster_peering_namespaced_one_per_namespace() -> None:
    assert peering_paths("egress-proxies", ()) == [
        "/apis/kopf.dev/v1/clusterkopfpeerings/egress-proxies"
    ]
    assert peering_paths("p", ("a", "b")) == [
        "/apis/kopf.dev/v1/namespaces/a/kopfpeerings/p",
        "/apis/kopf.dev/v1/namespaces/b/kopfpeerings/p",
    ]


def test_identity_is_the_pod_name_in_a_cluster_else_the_stored_one() -> None:
    assert peer_identity({"POD_ID": "op-7f9"}, "me@host/1234") == "op-7f9"
    assert peer_identity({"POD_ID": ""}, "me@host/1234") == "me@host/1234"
    assert peer_identity({}, "me@host/1234") == "me@host/1234"


async def test_the_status_pump_s_gate_reads_peering_at_most_every_max_age() -> None:
    asked: list[float] = []
    clock = ManualClock(start=100.0)
    answers = iter(["leader has a higher priority", None])

    async def gate() -> str | None:
        asked.append(clock.monotonic())
        return next(answers)

    cached = CachedGate(gate, max_age=2.0, clock=clock)
    assert repr(cached) == "<CachedGate [max age: 2 s | unasked]>"
    assert await cached() == "leader has a higher priority"
    clock.advance(1.9)
    assert await cached() == "leader has a higher priority"
    assert asked == [100.0]
    clock.advance(0.1)
    assert await cached() is None
    assert asked == [100.0, 102.0]
    assert repr(cached) == "<CachedGate [max age: 2 s | open]>"


async def test_a_peering_object_that_cannot_be_read_pauses_and_raises_nothing() -> None:
    class Disconnecting:
        async def get(self, path: str) -> dict[str, Any]:
            raise TransportError("Server disconnected")

    peering = Peering(Disconnecting(), "egress-proxies", 0, ME, ())  # type: ignore[arg-type]
    reason = await peering.sweep_blocker()
    assert reason is not None
    assert "clusterkopfpeerings/egress-proxies failed: Server disconnected" in reason


def test_by_start_the_earlier_replica_works_and_the_later_one_stands_by() -> None:
    first = priority_by_start(NOW)
    second = priority_by_start(NOW + datetime.timedelta(milliseconds=1))
    assert first > second
    peers = [peer("first", first), peer("second", second)]
    assert sweep_blocker(peers, "first", first, NOW) is None
    assert "first has a higher priority" in (sweep_blocker(peers, "second", second, NOW) or "")
    restarted = priority_by_start(NOW + datetime.timedelta(minutes=5))
    peers = [peer("first", restarted), peer("second", second)]
    assert sweep_blocker(peers, "second", second, NOW) is None, "a restarted active stands by"
    assert sweep_blocker(peers[1:], "second", second, NOW) is None, "the active's record is gone"


def test_by_arrival_a_joining_replica_ranks_below_every_live_peer() -> None:
    ahead = priority_by_start(NOW + datetime.timedelta(seconds=3))  # a peer whose clock is ahead
    peers = [peer("ahead", ahead), peer("fixed", 7), peer("dead", ahead - 50, seconds_left=-1)]
    joined = arrival_priority(peers, ME, NOW)
    assert joined == ahead - 1, "below the live peer a by-start rank would put it above"
    assert arrival_priority([], ME, NOW) == priority_by_start(NOW), "alone: by start"
    assert sweep_blocker([*peers, peer(ME, joined)], ME, joined, NOW) is not None


def test_by_arrival_a_restarted_replica_comes_back_below_the_one_that_took_over() -> None:
    # SIGKILLed, it left its keep-alive (at the top) under the name it comes back with.
    took_over = priority_by_start(NOW - datetime.timedelta(minutes=5))
    peers = [peer(ME, priority_by_start(NOW - datetime.timedelta(hours=1))), peer("b", took_over)]
    again = arrival_priority(peers, ME, NOW)
    assert again < took_over
    assert sweep_blocker([peer(ME, again), peer("b", took_over)], "b", took_over, NOW) is None
