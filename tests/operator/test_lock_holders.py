"""Which lock holders are provably gone by their keep-alives: the rule, without I/O."""

from __future__ import annotations

import datetime
import json

import pytest

from egress_proxies.operator.peering import Peer, peer_host
from egress_proxies.operator.stale_locks import PeerMemory, expired_hosts
from egress_proxies.stacks.backends import GoneHolders
from egress_proxies.stacks.backends.checkpoint import LockOwner

pytestmark = pytest.mark.unit

NOW = datetime.datetime(2026, 6, 1, 12, 0, tzinfo=datetime.UTC)


def peer(identity: str, seconds_left: float) -> Peer:
    return Peer(identity, 0, NOW + datetime.timedelta(seconds=seconds_left))


def lock(host: str, taken: str | None, pid: int = 4242) -> LockOwner:
    document = {"pid": pid, "hostname": host}
    if taken is not None:
        document["timestamp"] = taken
    owner = LockOwner.parse(json.dumps(document))
    assert owner is not None
    return owner


@pytest.mark.parametrize(
    ("identity", "host"),
    [
        ("operator-7d9c-x2k4q", "operator-7d9c-x2k4q"),  # POD_ID: the pod's name is its hostname
        ("egress@build-3/5f1a", "build-3"),  # a host process: user@host/random
        ("root@build-3/20261206/abc", "build-3"),  # kopf's own default identity
    ],
)
def test_a_peer_names_its_host(identity: str, host: str) -> None:
    assert peer_host(identity) == host


def test_a_host_is_gone_when_every_operator_seen_there_expired() -> None:
    peers = [
        peer("op@ghost/1", -10),
        peer("op@busy/1", -10),
        peer("op@busy/2", 20),
        peer("alive", 5),
        peer("op@twice/1", -50),
        peer("op@twice/2", -5),
    ]
    holders = ["ghost", "busy", "alive", "twice", "laptop"]
    assert expired_hosts(peers, holders, NOW) == {
        "ghost": NOW - datetime.timedelta(seconds=10),
        "twice": NOW - datetime.timedelta(seconds=5),  # the last of them to expire
    }


def test_memory_keeps_the_latest_keepalive_and_forgets_expired_hosts_without_locks() -> None:
    memory = PeerMemory()
    memory.observe([peer("op@a/1", 30), peer("op@b/1", -5)])
    memory.observe([peer("op@a/1", -100)])  # an older record read late changes nothing
    assert memory.expired(["a", "b"], NOW) == {"b": NOW - datetime.timedelta(seconds=5)}
    later = NOW + datetime.timedelta(seconds=60)
    memory.forget_expired(later, keep_hosts=["a"])
    assert memory.expired(["a", "b"], later) == {"a": NOW + datetime.timedelta(seconds=30)}


def test_a_lock_is_stale_only_if_taken_before_its_hosts_keepalive_expired() -> None:
    gone = GoneHolders(expired={"ghost": NOW})
    assert lock("ghost", "2026-06-01T11:59:59.123456789Z").gone(gone)
    assert lock("ghost", "2026-06-01T13:59:59+02:00").gone(gone)  # Go writes the local offset
    assert not lock("ghost", "2026-06-01T12:00:01Z").gone(gone), "taken after: someone else's"
    assert not lock("ghost", None).gone(gone), "no time: nothing proves it"
    assert not lock("elsewhere", "2026-06-01T11:00:00Z").gone(gone)
    assert lock("pod-gone", None).gone(GoneHolders(hosts=frozenset({"pod-gone"})))


def test_a_lock_with_an_unreadable_time_is_judged_by_the_other_rules_only() -> None:
    owner = lock("ghost", "yesterday")
    assert owner.taken is None
    assert not owner.gone(GoneHolders(expired={"ghost": NOW}))
    assert owner.gone(GoneHolders(hosts=frozenset({"ghost"})))
