"""The last hour of the console's numbers, in bounded memory: one ring of samples.

Every `interval` seconds the sampler (sampler.py) records one value per series
(a proxy's probe latency, a target's fleet pace, the fleet's totals). All
series share one ring of sample times, and each series is a float32 ring of
the same length, so an hour at 10 s costs 1.4 KiB per series. A series not
sampled for a whole span is dropped; at most `max_series` are kept (new ones
beyond are not recorded, and counted).
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Mapping

DEFAULT_INTERVAL = 10.0
DEFAULT_SPAN = 3600.0
DEFAULT_MAX_SERIES = 20_000

SeriesKey = tuple[str, str]  # (what, of whom): ("latency", "ns/name"), ("pace", "example.com")


class History:
    """Rings of samples over the last `span` seconds (see the module)."""

    def __init__(
        self,
        interval: float = DEFAULT_INTERVAL,
        span: float = DEFAULT_SPAN,
        max_series: int = DEFAULT_MAX_SERIES,
    ) -> None:
        if interval <= 0 or span < interval:
            raise ValueError("the history needs 0 < interval <= span")
        self.interval = interval
        self.span = span
        self._size = math.ceil(span / interval)
        self._max_series = max_series
        self._times = array("d", [math.nan]) * self._size
        self._empty = array("f", [math.nan]) * self._size
        self._series: dict[SeriesKey, array[float]] = {}
        self._last_sampled: dict[SeriesKey, int] = {}
        self._samples = 0  # samples recorded so far; the next goes to slot samples % size
        self._sparklines: dict[tuple[SeriesKey, int], list[float | None]] = {}
        self.refused = 0  # values not kept because max_series were full

    def __repr__(self) -> str:
        return (
            f"<History [series: {len(self._series)} | samples: {min(self._samples, self._size)}"
            f"/{self._size} | refused: {self.refused}]>"
        )

    def record(self, now: float, values: Mapping[SeriesKey, float | None]) -> None:
        """One sample at `now`: a value per series (None or a missing key: no value)."""
        slot = self._samples % self._size
        self._times[slot] = now
        for series in self._series.values():
            series[slot] = math.nan
        for key, value in values.items():
            if value is None:
                continue
            ring = self._series.get(key)
            if ring is None:
                if len(self._series) >= self._max_series:
                    self.refused += 1
                    continue
                ring = self._series[key] = array("f", self._empty)
            ring[slot] = value
            self._last_sampled[key] = self._samples
        self._samples += 1
        self._sparklines.clear()
        if self._samples % self._size == 0:
            self._drop_silent()

    def series(self, key: SeriesKey, points: int | None = None) -> list[float | None]:
        """The series' values, oldest first, one per sample (None where none was recorded).

        With `points`, the samples are grouped into that many buckets, each the mean
        of its values to a thousandth, for a sparkline.
        """
        if points is not None:
            # Asked for by every poll of every row, changed once per sample: kept until then.
            cached = self._sparklines.get((key, points))
            if cached is None:
                cached = self._sparklines[(key, points)] = self._series_of(key, points)
            return cached
        return self._series_of(key, None)

    def _series_of(self, key: SeriesKey, points: int | None) -> list[float | None]:
        values = self._series.get(key)
        order = self._order()
        raw: list[float | None] = [
            None if values is None or math.isnan(values[i]) else float(values[i]) for i in order
        ]
        if points is None or points >= len(raw):
            return raw
        buckets: list[float | None] = []
        for bucket in range(points):
            chunk = [
                v
                for v in raw[bucket * len(raw) // points : (bucket + 1) * len(raw) // points]
                if v is not None
            ]
            buckets.append(round(sum(chunk) / len(chunk), 3) if chunk else None)
        return buckets

    def times(self) -> list[float]:
        """The sample times, oldest first."""
        return [self._times[i] for i in self._order()]

    def _order(self) -> list[int]:
        if self._samples < self._size:
            return list(range(self._samples))
        start = self._samples % self._size
        return [*range(start, self._size), *range(start)]

    def _drop_silent(self) -> None:
        oldest = self._samples - self._size
        for key in [key for key, last in self._last_sampled.items() if last < oldest]:
            del self._series[key]
            del self._last_sampled[key]
