"""Probe slots: jitter stays within its bounds and spreads a fleet."""

from __future__ import annotations

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from egress_proxies.health.schedule import first_due, next_due

pytestmark = pytest.mark.unit

times = st.floats(min_value=0, max_value=1e6, allow_nan=False)
intervals = st.integers(min_value=1, max_value=3600)
seeds = st.integers(min_value=0, max_value=2**32)


@given(now=times, interval=intervals, seed=seeds)
def test_a_seeded_first_probe_lands_within_the_first_interval(
    now: float, interval: int, seed: int
) -> None:
    due = first_due(now, interval, seeded=True, rng=random.Random(seed))
    assert now <= due <= now + interval


@given(now=times, interval=intervals, seed=seeds)
def test_a_never_probed_proxy_is_due_now(now: float, interval: int, seed: int) -> None:
    assert first_due(now, interval, seeded=False, rng=random.Random(seed)) == now


@given(due=times, late=st.floats(min_value=0, max_value=100), interval=intervals, seed=seeds)
def test_a_phased_proxy_keeps_its_slot_unless_the_probe_overran_it(
    due: float, late: float, interval: int, seed: int
) -> None:
    now = due + late
    assert next_due(due, now, interval, phased=True, rng=random.Random(seed)) == max(
        due + interval, now
    )


@given(due=times, interval=intervals, seed=seeds)
def test_after_an_immediate_first_probe_the_slot_moves_half_to_one_and_a_half_intervals_on(
    due: float, interval: int, seed: int
) -> None:
    slot = next_due(due, due, interval, phased=False, rng=random.Random(seed))
    assert due + 0.5 * interval <= slot <= due + 1.5 * interval


def test_a_fleet_spreads_over_the_interval() -> None:
    rng = random.Random(3)
    slots = [first_due(0.0, 10, seeded=True, rng=rng) for _ in range(1000)]
    per_second = [sum(int(slot) == second for slot in slots) for second in range(10)]
    assert all(60 <= count <= 140 for count in per_second), per_second
    rephased = [next_due(0.0, 0.0, 10, phased=False, rng=rng) % 10 for _ in range(1000)]
    per_second = [sum(int(slot) == second for slot in rephased) for second in range(10)]
    assert all(60 <= count <= 140 for count in per_second), per_second
