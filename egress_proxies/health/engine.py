"""The health engine: a per-proxy schedule, a bounded pool of probe workers, reports on change.

The engine owns health state; the operator owns its representation in
status. Every report goes to one sink (the operator's single status writer),
and only when `policy` calls for one, so a steadily healthy proxy causes no
status write at all.

    engine = HealthEngine(catalog, emit=writer.offer, prober=prober, clock=SystemClock())
    await engine.run()  # until cancelled

Scheduling: the catalog is re-read at most once a second (new proxies,
replaced instances, deletions), and only while it is `synced` (whole: a
partial view would drop targets and admit others without credentials);
between reads the engine sleeps until the next probe is due. Each proxy has
at most one probe queued or running, so a hanging proxy holds one worker for
at most its timeout and never delays the others beyond that worker.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import logging
import math
import random
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, replace

from egress_proxies.catalog import ProxyCatalog, ProxyKey, ProxyRecord
from egress_proxies.clock import Clock
from egress_proxies.health.metrics import ProbeMetrics
from egress_proxies.health.policy import HealthReport, acknowledge, judge
from egress_proxies.health.probe import Failure, Prober, ProbeResult
from egress_proxies.health.schedule import next_due
from egress_proxies.health.state import HealthState, Instance, first_sight, replaced

logger = logging.getLogger(__name__)

HealthSink = Callable[[HealthReport], None]
"""Takes a report without blocking; raises (e.g. `asyncio.QueueFull`) if it cannot."""

DEFAULT_WORKERS = 64
CATALOG_SYNC_SECONDS = 1.0


@dataclass(frozen=True)
class _Job:
    key: ProxyKey
    epoch: int
    record: ProxyRecord
    due: float


class HealthEngine:
    """Probes every proxy in the catalog through the proxy and reports its health changes.

    Run it with `await run()` until cancelled. Tests step it instead: inside
    `async with engine.running()`, `tick()` hands every due probe to the
    workers and `await settled()` waits until they are done.
    """

    def __init__(
        self,
        catalog: ProxyCatalog,
        emit: HealthSink,
        prober: Prober,
        clock: Clock,
        metrics: ProbeMetrics | None = None,
        *,
        workers: int = DEFAULT_WORKERS,
        rng: random.Random | None = None,
        synced: Callable[[], bool] = lambda: True,
    ) -> None:
        if workers < 1:
            raise ValueError("the health engine needs at least one worker")
        self._catalog = catalog
        self._emit = emit
        self._prober = prober
        self._clock = clock
        self._metrics = metrics
        self._workers = workers
        self._rng = rng or random.Random()  # noqa: S311 (jitter, not a secret)
        self._synced = synced
        self._states: dict[ProxyKey, HealthState] = {}
        self._records: dict[ProxyKey, ProxyRecord] = {}
        self._schedule: list[tuple[float, int, ProxyKey]] = []  # (due, epoch, key) heap
        self._jobs: asyncio.Queue[_Job] = asyncio.Queue()
        self._epochs = itertools.count(1)
        self._next_sync = -math.inf

    def __repr__(self) -> str:
        states = self._states.values()
        in_flight = sum(state.in_flight for state in states)
        healthy = sum(state.healthy is True for state in states)
        unhealthy = sum(state.healthy is False for state in states)
        return (
            f"<HealthEngine [proxies: {len(self._states)} | in flight: {in_flight}"
            f" | healthy: {healthy} | unhealthy: {unhealthy}]>"
        )

    def snapshot(self, key: ProxyKey) -> HealthState | None:
        """What the engine knows about one proxy, or None if it is not probing it."""
        return self._states.get(key)

    async def run(self) -> None:
        """Probe until cancelled."""
        async with self.running():
            while True:
                await self._clock.sleep(self.tick())

    @asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """Keep the probe workers running for the duration of the block."""
        workers = [
            asyncio.create_task(self._work(), name=f"health-worker-{index}")
            for index in range(self._workers)
        ]
        try:
            yield
        finally:
            for worker in workers:
                worker.cancel()
            await asyncio.gather(*workers, return_exceptions=True)
            self._requeue_abandoned()

    def tick(self) -> float:
        """Re-read the catalog when due, queue every due probe; return seconds to the next tick."""
        now = self._clock.monotonic()
        if now >= self._next_sync:
            if self._synced():
                self._sync(now)
            else:
                logger.debug("health: the fleet is not synced; its targets are kept as they are")
            self._next_sync = now + CATALOG_SYNC_SECONDS
        while self._schedule and self._schedule[0][0] <= now:
            due, epoch, key = heapq.heappop(self._schedule)
            state = self._states.get(key)
            if state is None or state.epoch != epoch:
                continue  # pruned or reset since it was scheduled
            self._states[key] = replace(state, in_flight=True)
            self._jobs.put_nowait(_Job(key, epoch, self._records[key], due))
        next_due_at = self._schedule[0][0] if self._schedule else math.inf
        return min(next_due_at, self._next_sync) - now

    async def settled(self) -> None:
        """Wait until every queued probe has finished."""
        await self._jobs.join()

    def _sync(self, now: float) -> None:
        live: set[ProxyKey] = set()
        for record in self._catalog.records():
            if record.deleting:
                continue
            live.add(record.key)
            self._records[record.key] = record
            state = self._states.get(record.key)
            if state is None:
                self._admit(first_sight(record, next(self._epochs), now, self._rng))
            elif state.instance != Instance.of(record):
                logger.info("proxy %s has a new instance: its health starts over", record.key)
                self._admit(replaced(record, next(self._epochs), now))
        for key in self._states.keys() - live:
            del self._states[key]
            del self._records[key]
            if self._metrics is not None:
                self._metrics.forget(key)

    def _admit(self, state: HealthState) -> None:
        self._states[state.key] = state
        heapq.heappush(self._schedule, (state.next_due, state.epoch, state.key))

    def _current(self, job: _Job) -> HealthState | None:
        state = self._states.get(job.key)
        return state if state is not None and state.epoch == job.epoch else None

    async def _work(self) -> None:
        while True:
            job = await self._jobs.get()
            try:
                await self._probe(job)
            finally:
                self._jobs.task_done()

    async def _probe(self, job: _Job) -> None:
        if self._current(job) is None:
            return  # pruned or reset while queued
        started = self._clock.monotonic()
        if self._metrics is not None:
            self._metrics.observe_lateness(started - job.due)
        result = await self._probe_once(job.record, started)
        state = self._current(job)
        if state is None:
            return  # the result is about an instance that is gone
        if self._metrics is not None:
            self._metrics.observe_probe(job.key, result.latency_seconds, ok=result.ok)
        now = self._clock.monotonic()
        check = job.record.health_check
        judgement = judge(state, result, check, now=now, checked_at=self._clock.utcnow())
        state = replace(
            judgement.state,
            in_flight=False,
            phased=True,
            next_due=next_due(
                job.due, now, check.interval_seconds, phased=state.phased, rng=self._rng
            ),
        )
        if judgement.report is not None:
            state = self._deliver(state, judgement.report, now)
        self._admit(state)

    async def _probe_once(self, record: ProxyRecord, started: float) -> ProbeResult:
        try:
            return await self._prober.probe(record)
        except Exception as error:
            # A prober bug must not stall this proxy's schedule or kill the worker.
            logger.exception("the prober raised for proxy %s", record.key)
            return ProbeResult(
                latency_seconds=self._clock.monotonic() - started,
                failure=Failure.PROBE_ERROR,
                detail=f"the prober raised {type(error).__name__}",
            )

    def _deliver(self, state: HealthState, report: HealthReport, now: float) -> HealthState:
        try:
            self._emit(report)
        except Exception:
            logger.warning(
                "health report for %s not delivered; the next probe retries it",
                report.key,
                exc_info=True,
            )
            return state
        if state.reported is None or state.reported.healthy != report.healthy:
            logger.info(
                "proxy %s is %s: %s",
                report.key,
                "healthy" if report.healthy else "unhealthy",
                report.message,
            )
        return acknowledge(state, report, now)

    def _requeue_abandoned(self) -> None:
        while not self._jobs.empty():
            self._jobs.get_nowait()
            self._jobs.task_done()
        for state in list(self._states.values()):
            if state.in_flight:
                self._admit(replace(state, in_flight=False))
