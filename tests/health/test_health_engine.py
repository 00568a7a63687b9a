"""The health engine in virtual time: scheduling, pruning, resets, delivery, the worker pool."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable
from dataclasses import dataclass, field, replace

import pytest
from prometheus_client import CollectorRegistry

from egress_proxies.catalog import ProxyKey, ProxyRecord, proxy_key
from egress_proxies.clock import ManualClock
from egress_proxies.health import Failure, HealthEngine, HealthReport, ProbeResult
from egress_proxies.model import HealthCheck
from egress_proxies.telemetry.probe_metrics import PrometheusProbeMetrics
from tests.fakes import ListCatalog

pytestmark = pytest.mark.unit

INTERVAL = 10
STEP = 1.5 * INTERVAL  # every proxy is due exactly once per step (see schedule.py)
CHECK = HealthCheck(
    url="http://origin.test/", interval_seconds=INTERVAL, success_threshold=2, failure_threshold=3
)
OK = ProbeResult(latency_seconds=0.010)
DOWN = ProbeResult(latency_seconds=0.001, failure=Failure.PROXY_UNREACHABLE, detail="refused")


def record(name: str, healthy: bool | None = None, **fields: object) -> ProxyRecord:
    base = ProxyRecord(
        key=proxy_key("ns", name),
        uid=f"uid-{name}",
        namespace="ns",
        name=name,
        scheme="http",
        host="127.0.0.2",
        port=3128,
        health_check=CHECK,
        healthy=healthy,
        latency_millis=10 if healthy is not None else None,
    )
    return replace(base, **fields)  # type: ignore[arg-type]


@dataclass(frozen=True)
class ProbeCall:
    """Which proxy a probe went to, and at which address."""

    key: ProxyKey
    host: str


@dataclass
class ScriptedProber:
    """Answers from `results` (default OK); probes of `held` keys wait until released."""

    results: dict[ProxyKey, ProbeResult] = field(default_factory=dict)
    held: dict[ProxyKey, asyncio.Event] = field(default_factory=dict)
    calls: list[ProbeCall] = field(default_factory=list)
    active: int = 0
    peak: int = 0
    finished: int = 0
    raises: set[ProxyKey] = field(default_factory=set)

    async def probe(self, record: ProxyRecord) -> ProbeResult:
        self.calls.append(ProbeCall(record.key, record.host))
        self.active += 1
        self.peak = max(self.peak, self.active)
        try:
            await asyncio.sleep(0)  # a real probe awaits I/O: let other workers run
            if record.key in self.held:
                await self.held[record.key].wait()
            if record.key in self.raises:
                raise RuntimeError("prober bug")
            return self.results.get(record.key, OK)
        finally:
            self.active -= 1
            self.finished += 1

    def hold(self, key: ProxyKey) -> asyncio.Event:
        self.held[key] = asyncio.Event()
        return self.held[key]

    def count(self, key: ProxyKey) -> int:
        return sum(call.key == key for call in self.calls)


class Sink:
    """Collects reports; refuses them (like a full queue) while `full` is set."""

    def __init__(self) -> None:
        self.reports: list[HealthReport] = []
        self.full = False

    def __call__(self, report: HealthReport) -> None:
        if self.full:
            raise asyncio.QueueFull
        self.reports.append(report)


@dataclass
class Harness:
    catalog: ListCatalog
    prober: ScriptedProber
    sink: Sink
    clock: ManualClock
    registry: CollectorRegistry
    engine: HealthEngine

    async def step(self, seconds: float = STEP) -> None:
        """Advance virtual time, hand out what is due, wait for those probes."""
        self.clock.advance(seconds)
        self.engine.tick()
        await self.engine.settled()

    def sample(self, name: str, key: ProxyKey) -> float | None:
        return self.registry.get_sample_value(name, {"proxy": key})


def make_harness(*records: ProxyRecord, workers: int = 4) -> Harness:
    catalog, prober, sink = ListCatalog(*records), ScriptedProber(), Sink()
    clock, registry = ManualClock(start=1000.0), CollectorRegistry()
    engine = HealthEngine(
        catalog,
        sink,
        prober,
        clock,
        PrometheusProbeMetrics(registry),
        workers=workers,
        rng=random.Random(5),
    )
    return Harness(catalog, prober, sink, clock, registry, engine)


async def yield_until(condition: Callable[[], bool]) -> None:
    """Let other tasks run until `condition` holds (no time passes)."""
    for _ in range(10_000):
        if condition():
            return
        await asyncio.sleep(0)
    raise AssertionError("condition never held")


async def test_a_never_probed_proxy_probes_at_once_and_reports_after_success_threshold() -> None:
    h = make_harness(record("a"))
    async with h.engine.running():
        await h.step(0)
        assert h.prober.count(proxy_key("ns", "a")) == 1
        assert h.sink.reports == []
        await h.step()
        assert [(r.key, r.healthy, r.latency_millis) for r in h.sink.reports] == [
            (proxy_key("ns", "a"), True, 10)
        ]
        assert h.sink.reports[0].checked_at == h.clock.utcnow()
        for _ in range(10):
            await h.step()
    assert len(h.sink.reports) == 1, "a steadily healthy proxy is reported once"
    assert h.prober.count(proxy_key("ns", "a")) == 12


async def test_a_seeded_fleet_keeps_its_verdicts_and_spreads_its_first_probes() -> None:
    records = [record(f"p{i}", healthy=i % 2 == 0) for i in range(100)]
    h = make_harness(*records)
    h.engine.tick()
    dues = [h.engine.snapshot(r.key).next_due for r in records]  # type: ignore[union-attr]
    assert all(1000.0 <= due < 1000.0 + INTERVAL for due in dues)
    assert len({round(due) for due in dues}) >= 8, "first probes are spread over the interval"
    async with h.engine.running():
        for _ in range(2):
            await h.step(INTERVAL)
    assert all(r.healthy for r in h.sink.reports)
    assert len(h.sink.reports) == 50, "only the seeded-unhealthy ones report: they recovered"
    assert (
        repr(h.engine)
        == "<HealthEngine [proxies: 100 | in flight: 0 | healthy: 100 | unhealthy: 0]>"
    )


async def test_unhealthy_after_exactly_failure_threshold_failures_and_back() -> None:
    key = proxy_key("ns", "a")
    h = make_harness(record("a", healthy=True))
    async with h.engine.running():
        await h.step(0)  # first sight: the seeded proxy's first probe is jittered
        await h.step()
        h.prober.results[key] = DOWN
        for _ in range(CHECK.failure_threshold - 1):
            await h.step()
            assert h.sink.reports == []
        await h.step()
        assert [(r.healthy, r.reason, r.message) for r in h.sink.reports] == [
            (False, "ProxyUnreachable", "refused")
        ]
        h.prober.results[key] = OK
        await h.step()
        assert len(h.sink.reports) == 1
        await h.step()
        assert [r.healthy for r in h.sink.reports] == [False, True]


async def test_an_undelivered_report_is_retried_by_the_next_probe() -> None:
    key = proxy_key("ns", "a")
    h = make_harness(record("a", healthy=True))
    h.prober.results[key] = DOWN
    h.sink.full = True
    async with h.engine.running():
        await h.step(0)  # first sight: the seeded proxy's first probe is jittered
        for _ in range(CHECK.failure_threshold):
            await h.step()
        state = h.engine.snapshot(key)
        assert state is not None and state.healthy is False
        assert state.reported is not None and state.reported.healthy is True
        h.sink.full = False
        await h.step()
        assert [r.healthy for r in h.sink.reports] == [False]
        await h.step()
        assert len(h.sink.reports) == 1


async def test_a_proxy_gone_from_the_catalog_is_pruned_with_its_metrics() -> None:
    key = proxy_key("ns", "a")
    h = make_harness(record("a"), record("b"))
    h.prober.results[key] = DOWN
    async with h.engine.running():
        await h.step(0)
    assert h.sample("egress_proxies_healthcheck_failures_total", key) == 1
    assert h.sample("egress_proxies_healthcheck_duration_seconds_count", key) == 1
    h.catalog.remove(key)
    await h.step(1)
    assert h.engine.snapshot(key) is None
    assert h.sample("egress_proxies_healthcheck_failures_total", key) is None
    assert h.sample("egress_proxies_healthcheck_duration_seconds_count", key) is None
    assert h.engine.snapshot(proxy_key("ns", "b")) is not None


async def test_a_deleting_proxy_is_pruned_and_no_longer_probed() -> None:
    key = proxy_key("ns", "a")
    h = make_harness(record("a"))
    async with h.engine.running():
        await h.step(0)
        h.catalog.put(record("a", deleting=True))
        await h.step()
        await h.step()
    assert h.engine.snapshot(key) is None
    assert h.prober.count(key) == 1


async def test_a_result_for_a_pruned_proxy_is_dropped() -> None:
    key = proxy_key("ns", "a")
    h = make_harness(record("a"))
    release = h.prober.hold(key)
    async with h.engine.running():
        h.engine.tick()
        await asyncio.sleep(0)  # let a worker pick the probe up
        h.catalog.remove(key)
        h.clock.advance(1)
        h.engine.tick()
        release.set()
        await h.engine.settled()
    assert h.engine.snapshot(key) is None
    assert h.sample("egress_proxies_healthcheck_duration_seconds_count", key) is None


@pytest.mark.parametrize("change", [{"host": "127.0.0.3"}, {"port": 3129}, {"uid": "uid-new"}])
async def test_a_new_instance_resets_health_and_probes_at_once(change: dict[str, object]) -> None:
    key = proxy_key("ns", "a")
    h = make_harness(record("a", healthy=True))
    h.prober.results[key] = DOWN
    async with h.engine.running():
        await h.step(0)  # first sight: the seeded proxy's first probe is jittered
        await h.step()
        await h.step()
        old = h.engine.snapshot(key)
        assert old is not None and old.failures == 2
        h.catalog.put(record("a", healthy=True, **change))
        h.prober.results[key] = OK
        await h.step(1)
        new = h.engine.snapshot(key)
        assert new is not None
        assert (new.failures, new.successes, new.reported) == (0, 1, None)
        assert new.healthy is None and new.epoch != old.epoch
        assert h.prober.count(key) == 3
        await h.step()
    assert [(r.healthy, r.uid) for r in h.sink.reports] == [(True, change.get("uid", "uid-a"))], (
        "the new instance's first verdict is reported"
    )


async def test_a_result_from_the_replaced_instance_is_dropped() -> None:
    key = proxy_key("ns", "a")
    h = make_harness(record("a"))
    release = h.prober.hold(key)
    h.prober.results[key] = DOWN
    async with h.engine.running():
        h.engine.tick()
        await asyncio.sleep(0)
        h.catalog.put(record("a", host="127.0.0.3"))
        h.clock.advance(1)
        h.engine.tick()
        del h.prober.held[key]
        h.prober.results[key] = OK
        release.set()
        await h.engine.settled()
    state = h.engine.snapshot(key)
    assert state is not None and (state.failures, state.successes) == (0, 1)
    assert [call.host for call in h.prober.calls] == ["127.0.0.2", "127.0.0.3"]


async def test_the_catalog_is_read_at_most_once_a_second() -> None:
    h = make_harness(record("a"))
    async with h.engine.running():
        await h.step(0)
        h.catalog.put(record("b"))
        await h.step(0.5)
        assert h.engine.snapshot(proxy_key("ns", "b")) is None
        await h.step(0.5)
        assert h.prober.count(proxy_key("ns", "b")) == 1


async def test_a_hanging_proxy_holds_one_worker_and_delays_no_other_probe() -> None:
    hanging = proxy_key("ns", "hang")
    others = [record(f"p{i}") for i in range(6)]
    h = make_harness(record("hang"), *others, workers=2)
    release = h.prober.hold(hanging)
    async with h.engine.running():
        h.engine.tick()
        await yield_until(lambda: h.prober.finished == len(others))
        assert h.prober.active == 1
        assert repr(h.engine) == (
            "<HealthEngine [proxies: 7 | in flight: 1 | healthy: 0 | unhealthy: 0]>"
        )
        # The others' next probes run while the hanging one is still out.
        for rounds in (2, 3):
            h.clock.advance(STEP)
            h.engine.tick()
            await yield_until(lambda: h.prober.finished == len(others) * rounds)  # noqa: B023
        assert h.prober.count(hanging) == 1
        release.set()
        await h.engine.settled()
    assert {r.key for r in h.sink.reports} == {r.key for r in others}


async def test_no_more_probes_run_at_once_than_there_are_workers() -> None:
    records = [record(f"p{i}") for i in range(20)]
    h = make_harness(*records, workers=3)
    async with h.engine.running():
        await h.step(0)
    assert h.prober.peak == 3
    assert h.prober.finished == 20


async def test_a_prober_that_raises_counts_as_a_failed_probe() -> None:
    key = proxy_key("ns", "a")
    h = make_harness(record("a"))
    h.prober.raises.add(key)
    async with h.engine.running():
        await h.step(0)
        for _ in range(CHECK.failure_threshold - 1):
            await h.step()
    assert [(r.healthy, r.reason) for r in h.sink.reports] == [(False, "ProbeError")]


async def test_lateness_is_observed_against_the_schedule() -> None:
    h = make_harness(record("a"))
    async with h.engine.running():
        await h.step(0)
        state = h.engine.snapshot(proxy_key("ns", "a"))
        assert state is not None
        await h.step(state.next_due - h.clock.monotonic() + 2.0)
    assert h.registry.get_sample_value("egress_proxies_healthcheck_lateness_seconds_count") == 2
    assert h.registry.get_sample_value("egress_proxies_healthcheck_lateness_seconds_sum") == 2.0


async def test_probes_abandoned_by_a_stop_run_again_after_a_restart() -> None:
    key = proxy_key("ns", "a")
    h = make_harness(record("a"))
    h.prober.hold(key)
    async with h.engine.running():
        h.engine.tick()
        await asyncio.sleep(0)
    state = h.engine.snapshot(key)
    assert state is not None and not state.in_flight
    del h.prober.held[key]
    async with h.engine.running():
        await h.step(0)
    assert h.prober.count(key) == 2


async def test_run_sleeps_on_the_clock_between_ticks_until_cancelled() -> None:
    h = make_harness(record("a"), record("b", healthy=True))
    task = asyncio.create_task(h.engine.run())
    for _ in range(5 * INTERVAL):
        await yield_until(lambda: h.clock.sleepers > 0)
        h.clock.advance(1)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    # 50 virtual seconds: one probe per 10 s, give or take the random first slot.
    assert h.prober.count(proxy_key("ns", "a")) in (5, 6)
    assert h.prober.count(proxy_key("ns", "b")) in (4, 5)
    assert [r.key for r in h.sink.reports] == [proxy_key("ns", "a")]


def test_at_least_one_worker() -> None:
    with pytest.raises(ValueError, match="at least one worker"):
        HealthEngine(ListCatalog(), Sink(), ScriptedProber(), ManualClock(), workers=0)
