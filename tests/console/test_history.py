"""The console's history: a bounded ring per series, one shared ring of sample times."""

from __future__ import annotations

import pytest

from egress_proxies.console.history import History

pytestmark = pytest.mark.unit


def test_values_come_back_oldest_first_and_the_ring_keeps_only_the_span() -> None:
    history = History(interval=10, span=30)
    for sample in range(5):
        history.record(100.0 + 10 * sample, {("pace", "a"): float(sample)})
    assert history.times() == [120.0, 130.0, 140.0]
    assert history.series(("pace", "a")) == [2.0, 3.0, 4.0]
    assert repr(history) == "<History [series: 1 | samples: 3/3 | refused: 0]>"


def test_a_sample_without_a_series_value_is_a_gap() -> None:
    history = History(interval=10, span=40)
    history.record(0, {("pace", "a"): 1.0, ("pace", "b"): 5.0})
    history.record(10, {("pace", "a"): 2.0})
    history.record(20, {("pace", "a"): None, ("pace", "b"): 6.0})
    assert history.series(("pace", "a")) == [1.0, 2.0, None]
    assert history.series(("pace", "b")) == [5.0, None, 6.0]
    assert history.series(("pace", "never")) == [None, None, None]


def test_a_series_silent_for_a_whole_span_is_dropped() -> None:
    history = History(interval=1, span=4)
    history.record(0, {("latency", "gone"): 9.0})
    for second in range(1, 9):
        history.record(second, {("latency", "here"): 1.0})
    assert "series: 1 " in repr(history)
    assert history.series(("latency", "gone")) == [None] * 4


def test_new_series_beyond_the_bound_are_refused_and_counted() -> None:
    history = History(interval=1, span=2, max_series=2)
    history.record(0, {("pace", name): 1.0 for name in "abc"})
    assert history.refused == 1
    assert history.series(("pace", "c")) == [None]


def test_a_sparkline_averages_buckets_of_samples() -> None:
    history = History(interval=1, span=6)
    for second, value in enumerate([1.0, 3.0, None, None, 5.0, 7.0]):
        history.record(second, {("latency", "a"): value})
    assert history.series(("latency", "a"), points=3) == [2.0, None, 6.0]


def test_an_impossible_history_is_refused() -> None:
    with pytest.raises(ValueError, match="interval"):
        History(interval=0)
    with pytest.raises(ValueError, match="interval"):
        History(interval=10, span=5)
