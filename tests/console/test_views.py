"""The console's views are pure: plain values in, the JSON the page renders out."""

from __future__ import annotations

import pytest

from egress_proxies.catalog import proxy_key
from egress_proxies.catalog.fleet import Fleet
from egress_proxies.clock import ManualClock
from egress_proxies.console.eventlog import EventLog
from egress_proxies.console.history import History
from egress_proxies.console.leasebook import LeaseBook
from egress_proxies.console.pools import PoolBook
from egress_proxies.console.views import (
    cooldowns_view,
    fleet_view,
    pools_view,
    proxy_facts,
    site_view,
)
from egress_proxies.events import Regarding
from egress_proxies.leases import Cooling
from harness.console import RecordingEvents, pool_body, proxy_body

pytestmark = pytest.mark.unit


def test_fleet_rows_are_sorted_and_carry_load_trouble_and_history() -> None:
    clock = ManualClock()
    history = History(interval=10, span=60)
    history.record(clock.time(), {("latency", "crawl/b"): 20.0})
    facts = [proxy_facts(proxy_body("b", pool="eu")), proxy_facts(proxy_body("a", healthy=None))]
    cooling = [Cooling(proxy_key("crawl", "b"), "shop.example", 50.0, True)]
    view = fleet_view(facts, {proxy_key("crawl", "b"): 1}, cooling, LeaseBook(clock), history, 5.0)
    assert [row["key"] for row in view["proxies"]] == ["crawl/a", "crawl/b"]
    a, b = view["proxies"]
    assert (a["ready"], a["leases"], a["pool"]) == (None, 0, None)
    assert (b["ready"], b["healthy"], b["leases"], b["maxLeases"], b["pool"]) == (
        "True",
        "True",
        1,
        1,
        "eu",
    )
    assert b["latencyHistory"] == [20.0] and b["address"] == "127.0.0.1:3128"
    assert (a["cooldowns"], b["cooldowns"]) == (0, 1)
    assert view["count"] == 2 and view["now"] == 5.0


def test_an_unseen_site_has_no_view_and_no_cooldown_is_listed() -> None:
    clock = ManualClock()
    book = LeaseBook(clock)
    assert site_view("never.example", book, History(), clock.time()) is None
    assert cooldowns_view([], clock.time()) == {"now": clock.time(), "cooldowns": [], "count": 0}


def test_cooldowns_are_listed_by_proxy_then_site_with_their_cause() -> None:
    key = proxy_key("crawl", "a")
    view = cooldowns_view(
        [Cooling(key, "b.example", 40.0, False), Cooling(key, None, 30.0, True)], 10.0
    )
    assert [(c["target"], c["secondsLeft"], c["kind"]) for c in view["cooldowns"]] == [
        (None, 20.0, "banned"),
        ("b.example", 30.0, "rate_limited"),
    ]


def test_pools_show_their_counts_hash_and_last_events_newest_first() -> None:
    clock = ManualClock()
    pools, events = PoolBook(), EventLog(RecordingEvents(), clock)
    pools.put(pool_body("eu", replicas=3))
    regarding = Regarding("crawl.example.com/v1", "ProxyPool", "crawl", "eu", "uid-pool-eu")
    events.record(regarding, "Normal", "ScaledUp", "2 -> 3")
    clock.advance(1)
    events.record(regarding, "Normal", "Created", "eu-x")
    [pool] = pools_view(pools.pools(), events, clock.time())["pools"]
    assert (pool["key"], pool["replicas"], pool["ready"], pool["minReplicas"]) == (
        "crawl/eu",
        3,
        3,
        None,
    )
    assert len(pool["templateHash"]) == 10
    assert [event["reason"] for event in pool["events"]] == ["Created", "ScaledUp"]


def test_the_fleet_hands_out_a_new_document_only_for_a_changed_body() -> None:
    fleet = Fleet()
    fleet.put_proxy(proxy_body("a"))
    fleet.put_proxy(proxy_body("b"))
    before, version = dict(fleet.proxy_documents()), fleet.version
    fleet.put_proxy(proxy_body("b", latency_millis=99))
    after = fleet.proxy_documents()
    a, b = proxy_key("crawl", "a"), proxy_key("crawl", "b")
    assert after[a] is before[a]
    assert after[b] is not before[b]
    assert fleet.version == version + 1
