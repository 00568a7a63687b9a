"""Feeds the History: every interval, each proxy's latency, each target's pace, the totals.

With shared samples (the Redis store: tally.py), the numbers from the lease notes
(each site's fleet pace, the leases now) of each interval are the first replica's
to offer them, and every replica records the same ones at the interval's start,
so their histories agree, and a restarted process reads the last hour back.
The proxies' latencies come from each process's own watch of the fleet.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from egress_proxies.catalog import ProxyCatalog
from egress_proxies.clock import Clock
from egress_proxies.console.history import History, SeriesKey
from egress_proxies.console.leasebook import LeaseFacts
from egress_proxies.leases import is_offerable

LATENCY, PACE, FLEET = "latency", "pace", "fleet"
OFFERABLE, LEASES = "offerable", "leases"

Sample = dict[SeriesKey, float | None]


class SharedSamples(Protocol):
    """Samples of the lease numbers shared by every replica (tally.py's RedisTally)."""

    async def exchange(
        self, at: float, interval: float, span: float, values: Mapping[SeriesKey, float | None]
    ) -> list[tuple[float, Sample]]:
        """Offer `values` as the sample at `at` (kept unless a replica's is already) and
        return, oldest first, every sample of the last `span` not returned before."""
        ...


class Sampler:
    """Takes one sample of the fleet and the lease facts (this process's or the fleet's) into a
    History per interval."""

    def __init__(
        self,
        catalog: ProxyCatalog,
        book: LeaseFacts,
        history: History,
        clock: Clock,
        shared: SharedSamples | None = None,
    ) -> None:
        self._catalog = catalog
        self._book = book
        self._history = history
        self._clock = clock
        self._shared = shared

    def __repr__(self) -> str:
        shared = " shared" if self._shared is not None else ""
        return f"<Sampler every {self._history.interval:g}s{shared} {self._history!r}>"

    def sample(self) -> None:
        """Record the numbers as they are now."""
        now = self._clock.time()
        self._history.record(now, self._fleet_values() | self._lease_values(now))

    async def sample_shared(self, shared: SharedSamples) -> None:
        """Record the samples shared since the last call, this interval's with our latencies."""
        now = self._clock.time()
        interval, span = self._history.interval, self._history.span
        at = now // interval * interval
        for sample_at, values in await shared.exchange(at, interval, span, self._lease_values(now)):
            self._history.record(
                sample_at, values | self._fleet_values() if sample_at == at else values
            )

    async def run(self) -> None:
        """Sample now and then every interval, until cancelled."""
        interval = self._history.interval
        while True:
            if self._shared is None:
                self.sample()
                await self._clock.sleep(interval)
            else:
                await self.sample_shared(self._shared)
                # Into the next interval: every replica samples each interval once.
                await self._clock.sleep(interval - self._clock.time() % interval + interval / 20)

    def _fleet_values(self) -> Sample:
        records = self._catalog.records()
        values: Sample = {(LATENCY, record.key): record.latency_millis for record in records}
        values[(FLEET, OFFERABLE)] = sum(1 for record in records if is_offerable(record))
        return values

    def _lease_values(self, now: float) -> Sample:
        values: Sample = {
            (PACE, target): book.fleet_pace(now) for target, book in self._book.targets().items()
        }
        values[(FLEET, LEASES)] = len(self._book.leases())
        return values
