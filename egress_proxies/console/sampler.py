"""Feeds the History: every interval, each proxy's latency, each target's pace, the totals."""

from __future__ import annotations

from egress_proxies.catalog import ProxyCatalog
from egress_proxies.clock import Clock
from egress_proxies.console.history import History, SeriesKey
from egress_proxies.console.leasebook import LeaseFacts
from egress_proxies.leases import is_offerable

LATENCY, PACE, FLEET = "latency", "pace", "fleet"
OFFERABLE, LEASES = "offerable", "leases"


class Sampler:
    """Takes one sample of the fleet and the lease facts (this process's or the fleet's) into a
    History per interval."""

    def __init__(
        self, catalog: ProxyCatalog, book: LeaseFacts, history: History, clock: Clock
    ) -> None:
        self._catalog = catalog
        self._book = book
        self._history = history
        self._clock = clock

    def __repr__(self) -> str:
        return f"<Sampler every {self._history.interval:g}s {self._history!r}>"

    def sample(self) -> None:
        """Record the numbers as they are now."""
        now = self._clock.time()
        records = self._catalog.records()
        values: dict[SeriesKey, float | None] = {
            (LATENCY, record.key): record.latency_millis for record in records
        }
        for target, book in self._book.targets().items():
            values[(PACE, target)] = book.fleet_pace(now)
        values[(FLEET, OFFERABLE)] = sum(1 for record in records if is_offerable(record))
        values[(FLEET, LEASES)] = len(self._book.leases())
        self._history.record(now, values)

    async def run(self) -> None:
        """Sample now and then every interval, until cancelled."""
        while True:
            self.sample()
            await self._clock.sleep(self._history.interval)
