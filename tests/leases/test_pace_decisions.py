"""The pace's decisions as pure functions of plain values: when a pair probes above its limit."""

from __future__ import annotations

import pytest

from egress_proxies.leases.pace import PaceLimits, PaceState, lowered, probe_wait, raised

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
