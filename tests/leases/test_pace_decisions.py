"""The pace's decisions as pure functions of plain values: when a pair probes above its limit
(one pair of a target at a time, the others following it), how a target's pairs in slow start
trail the one exploring it, and how what the site accepted is measured over reports."""

from __future__ import annotations

import pytest

from egress_proxies.catalog import ProxyKey
from egress_proxies.leases.pace import (
    EXPLORING,
    PaceLimits,
    Paces,
    PaceState,
    adopted,
    following,
    lowered,
    measured,
    probe_wait,
    raised,
    trailing,
)

pytestmark = pytest.mark.unit

LIMITS = PaceLimits(start=1.0, cruise=0.95, probe_after=30.0)


@pytest.mark.parametrize(
    ("limit", "wait"),
    [(0.5, 200.0), (1.0, 100.0), (2.0, 50.0), (3.0, 100.0 / 3.0), (5.0, 30.0), (20.0, 30.0)],
)
def test_a_probe_waits_for_probe_after_and_a_hundred_requests_at_the_limit(
    limit: float, wait: float
) -> None:
    assert probe_wait(limit, LIMITS) == pytest.approx(wait)


@pytest.mark.parametrize(("limit", "probe_at"), [(1, 100.0), (2, 50.0), (10, 30.0)])
def test_a_counted_limit_holds_the_cruise_until_its_probe(limit: int, probe_at: float) -> None:
    state = PaceState(rate=2.0 * limit)
    assert lowered(state, 0.0, None, LIMITS, accepted=limit)
    assert (state.limit, state.rate, state.probe_at) == (limit, 0.95 * limit, probe_at)
    cruise = state.rate
    assert not raised(state, 1000, probe_at - 0.1, LIMITS, cap=50.0), "cruising: no probe yet"
    assert state.rate == cruise
    assert raised(state, limit, probe_at, LIMITS, cap=50.0), "the probe"
    assert state.rate == pytest.approx(cruise * 1.05 ** (1 / 0.95))


def test_a_pair_in_slow_start_climbs_no_higher_than_the_site_accepted_while_another_explores() -> (
    None
):
    fleet = PaceState(rate=8.0, changed_at=10.0, accepted=4.0)  # raised to 8 at 10 s; 4/s accepted
    follower = PaceState(rate=2.0)
    assert trailing(follower, fleet, now=11.0) == 4.0
    assert raised(follower, 100, 11.0, LIMITS, cap=50.0, trail=4.0)
    assert follower.rate == 4.0, "not 2 x 2^50"
    assert trailing(follower, fleet, now=11.0) == 4.0
    assert not raised(follower, 100, 11.0, LIMITS, cap=50.0, trail=4.0), "stays there"


def test_the_explorer_and_pairs_past_it_or_past_slow_start_have_no_trail() -> None:
    fleet = PaceState(rate=8.0, changed_at=10.0, accepted=4.0)
    assert trailing(PaceState(rate=8.0), fleet, now=11.0) is None, "the explorer itself"
    assert trailing(PaceState(rate=2.0), fleet, now=10.0 + EXPLORING) is None, "it stopped"
    limited = PaceState(rate=2.0, limit=5.0)
    assert trailing(limited, fleet, now=11.0) is None, "a known limit: the cruise applies"
    found = PaceState(rate=4.75, changed_at=10.0, limit=5.0)
    assert trailing(PaceState(rate=2.0), found, now=11.0) is None, "the fleet found the limit"


def test_the_fleet_measures_what_the_site_accepted_over_a_second_or_more() -> None:
    paces = Paces(LIMITS)
    p0, p1, p2 = (ProxyKey(f"crawl/p{index}") for index in range(3))
    assert paces.record(p0, "s", now=0.0, ok=1).rate == 4.0, "p0 explores: 1 request = 1 s"
    assert paces.learned(p1, "s", now=0.5).rate == 1.0, "a newcomer: the start, nothing measured"
    assert paces.record(p0, "s", now=0.5, ok=1).rate == pytest.approx(4.0 * 4.0**0.25), (
        "0.5 s since: not measured"
    )
    assert paces.record(p0, "s", now=2.0, ok=3).rate > 4.0, "3 in 1.5 s: 2/s accepted"
    assert paces.learned(p1, "s", now=2.5).rate == 2.0, "a newcomer starts at what was accepted"
    assert paces.record(p1, "s", now=2.5, ok=8).rate == 2.0, "and climbs no higher"
    assert paces.learned(p2, "s", now=4.0).rate > 4.0, "the explorer stopped: where it got"


def test_counts_add_up_over_reports_until_a_second_has_passed() -> None:
    state = PaceState(rate=4.0)
    assert measured(state, 5, now=0.0) == 0.0, "the first report's span is unknown"
    assert measured(state, 3, now=0.8) == 0.0, "0.8 s: not a second yet"
    assert measured(state, 4, now=1.6) == pytest.approx(7 / 1.6), "7 over 1.6 s"
    assert measured(state, 2, now=2.0) == 0.0, "a new second begins"
    assert measured(state, 2, now=2.55) == pytest.approx(4 / 0.95), "a second, less jitter"


def test_a_pair_due_to_probe_follows_another_probing_one_step_behind() -> None:
    fleet = PaceState(rate=10.0, limit=10.0, changed_at=5.0, before=9.8)  # probed 9.8 -> 10
    cruising = PaceState(rate=9.5, limit=10.0, probe_at=4.0)
    assert following(cruising, fleet, now=6.0, limits=LIMITS) == 9.8, "where the site said ok"
    assert raised(cruising, 10, 6.0, LIMITS, cap=50.0, follow=9.8)
    assert cruising.rate == 9.8, "not 5 % up on its own"
    first_raise = PaceState(rate=9.975, limit=10.0, changed_at=5.0, before=9.5)
    assert following(cruising, first_raise, 6.0, LIMITS) == 9.8, "never down"
    assert following(PaceState(rate=10.0, limit=10.0), fleet, 6.0, LIMITS) is None, "the prober"
    assert following(cruising, fleet, now=5.0 + EXPLORING, limits=LIMITS) is None, "it stopped"
    at_cruise = PaceState(rate=9.5, limit=10.0, changed_at=5.0, before=9.0)
    assert following(cruising, at_cruise, now=6.0, limits=LIMITS) is None, "nobody above it"


def test_a_pair_due_to_probe_takes_the_probe_another_settled() -> None:
    fleet = PaceState(rate=9.0, limit=10.0, probe_at=40.0)  # a probe at 10 s found 10/s
    due = PaceState(rate=9.5, limit=10.0, probe_at=35.0)
    adopted(due, fleet, now=36.0, limits=LIMITS)
    assert (due.rate, due.limit, due.probe_at) == (9.5, 10.0, 40.0), "its next probe time"
    followed = PaceState(rate=9.9, limit=10.0, probe_at=35.0)
    adopted(followed, fleet, now=36.0, limits=LIMITS)
    assert (followed.rate, followed.probe_at) == (9.5, 40.0), "back to the cruise"
    higher = PaceState(rate=11.4, limit=12.0, probe_at=40.0)
    adopted(due, higher, now=36.0, limits=LIMITS)
    assert (due.rate, due.limit) == (9.5, 10.0), "not due any more"
    adopted(due, higher, now=40.0, limits=LIMITS)
    assert (due.rate, due.limit) == (9.5, 10.0), "nothing settled since: it probes itself"
    later = PaceState(rate=11.4, limit=12.0, probe_at=70.0)
    adopted(due, later, now=41.0, limits=LIMITS)
    assert due.rate == pytest.approx(11.4), "a higher limit: the cruise below it at once"
    assert (due.limit, due.probe_at) == (12.0, 70.0)
    lower = PaceState(rate=7.6, limit=8.0, probe_at=100.0)
    adopted(due, lower, now=71.0, limits=LIMITS)
    assert (due.limit, due.probe_at) == (12.0, 100.0), "a lower limit is each pair's to find"
