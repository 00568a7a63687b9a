"""Every series the running operator exports, scraped after a scripted scenario.

Two Proxies (a managed one that turns Ready, an External one on a dead port
that turns Unhealthy), three granted leases plus a refused and an unmatched
request through the discovery API, one rate-limited report, and one orphaned
pod deleted by the GC. The scrape is parsed with prometheus_client's parser;
each expected series is taken out of it and checked, and nothing may be left:
a new metric must be added here.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families

from egress_proxies.devcluster.controlplane import free_port
from egress_proxies.kube import KubeClient
from egress_proxies.model import GROUP, VERSION, Phase
from egress_proxies.telemetry.metrics import STACK_BUCKETS, SWEEP_BUCKETS
from egress_proxies.telemetry.probe_metrics import DURATION_BUCKETS, LATENESS_BUCKETS
from egress_proxies.vocabulary import UID_LABEL
from harness.operator import (
    OperatorProcess,
    managed_proxy,
    new_operator,
    proxy_path,
    wait_for_condition,
)
from harness.origins import serve_origin
from tests.conftest import ClusterHandle, wait_for
from tests.gc.test_orphan_gc import pod_names, stray_pod
from tests.telemetry.test_tracing import without_tracing_env

pytestmark = pytest.mark.e2e

SCENARIO_ENV = {
    "EGRESS_PROXIES_GC_INTERVAL_SECONDS": "2",
    "EGRESS_PROXIES_GC_MIN_AGE_SECONDS": "1",
}
READY_CHECK = {"intervalSeconds": 2, "timeoutSeconds": 2, "expectedStatus": 200}
DEAD_CHECK = {"intervalSeconds": 1, "timeoutSeconds": 1, "failureThreshold": 2}

GAUGES = (
    "egress_proxies_proxies",
    "egress_proxies_leases_active",
    "egress_proxies_lease_cooldowns_active",
    "egress_proxies_gc_last_sweep_timestamp_seconds",
    "egress_proxies_targets_paused",
)
COUNTERS = (
    "egress_proxies_healthcheck_failures",
    "egress_proxies_lease_requests",
    "egress_proxies_stack_operations",
    "egress_proxies_provider_requests",
    "egress_proxies_gc_deletions",
    "egress_proxies_lease_reports",
    "egress_proxies_target_pauses",
)
POOL_COUNTERS = (
    "egress_proxies_pool_drains",
    "egress_proxies_pool_rounds",
    "egress_proxies_pool_scaling_decisions",
)
HISTOGRAMS = (
    "egress_proxies_healthcheck_duration_seconds",
    "egress_proxies_healthcheck_lateness_seconds",
    "egress_proxies_stack_operation_duration_seconds",
    "egress_proxies_gc_sweep_duration_seconds",
)

SampleKey = tuple[str, tuple[tuple[str, str], ...]]


def _key(name: str, labels: dict[str, str]) -> SampleKey:
    return name, tuple(sorted(labels.items()))


@dataclass(frozen=True)
class Histogram:
    """One histogram child: its observation count and sum."""

    count: float
    sum: float


class Scrape:
    """A parsed /metrics page from which expected series are taken one by one.

    Counters and histograms come with a `_created` series per child (the text
    format exports it as a gauge family of its own); taking a child checks that
    its creation time lies in `window` and takes it too.
    """

    def __init__(self, text: str, window: tuple[float, float]) -> None:
        families = list(text_string_to_metric_families(text))
        self.types = {family.name: family.type for family in families}
        self.samples = {
            _key(sample.name, sample.labels): sample.value
            for family in families
            for sample in family.samples
        }
        assert len(self.samples) == sum(len(family.samples) for family in families), "duplicates"
        self.window = window

    def gauge(self, name: str, **labels: str) -> float:
        """Take one gauge sample."""
        return self._take(name, labels)

    def counter(self, name: str, **labels: str) -> float:
        """Take one counter child (`_total` and `_created`)."""
        self._take_created(name, labels)
        return self._take(f"{name}_total", labels)

    def histogram(self, name: str, buckets: Sequence[float], **labels: str) -> Histogram:
        """Take one histogram child: cumulative buckets ending at +Inf = count, count, sum."""
        self._take_created(name, labels)
        bounds = [*(str(float(bound)) for bound in buckets), "+Inf"]
        cumulative = [self._take(f"{name}_bucket", {**labels, "le": le}) for le in bounds]
        assert cumulative == sorted(cumulative), (name, labels, cumulative)
        result = Histogram(self._take(f"{name}_count", labels), self._take(f"{name}_sum", labels))
        assert cumulative[-1] == result.count, (name, labels)
        return result

    def _take_created(self, name: str, labels: dict[str, str]) -> None:
        created = self._take(f"{name}_created", labels)
        low, high = self.window
        assert low <= created <= high, (name, labels, created, self.window)

    def _take(self, name: str, labels: dict[str, str]) -> float:
        key = _key(name, labels)
        assert key in self.samples, f"missing series {key}"
        return self.samples.pop(key)


@pytest.fixture
def operator(
    dev_cluster: ClusterHandle, namespace: str, tmp_path: Path
) -> Iterator[OperatorProcess]:
    """The operator with a fast GC and no tracing variables, started by the test."""
    process = new_operator(dev_cluster.kubeconfig, namespace, tmp_path, SCENARIO_ENV)
    process.env = without_tracing_env(process.env)
    yield process
    process.stop()


def external_proxy(name: str, port: int, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "Proxy",
        "metadata": {"name": name},
        "spec": {"mode": "External", "endpoint": {"host": "127.0.0.1", "port": port}, **spec},
    }


async def scrape(session: aiohttp.ClientSession, url: str) -> str:
    async with session.get(url) as response:
        assert response.status == 200
        assert response.headers["Content-Type"].startswith("text/plain")
        return await response.text()


async def test_every_exported_series_after_a_scripted_scenario(
    kube: KubeClient, namespace: str, operator: OperatorProcess
) -> None:
    started = time.time()
    operator.start()
    pods = f"/api/v1/namespaces/{namespace}/pods"
    await kube.create(pods, stray_pod("orphan", {UID_LABEL: "no-such-proxy"}))
    async with serve_origin() as origin, aiohttp.ClientSession() as session:
        await kube.create(
            proxy_path(namespace),
            managed_proxy(
                "ready",
                attributes={"role": "ready"},
                maxTargets=3,
                healthCheck={**READY_CHECK, "url": origin.url},
            ),
        )
        await kube.create(
            proxy_path(namespace),
            external_proxy(
                "dead",
                free_port(),
                attributes={"role": "dead"},
                healthCheck={**DEAD_CHECK, "url": origin.url},
            ),
        )
        await wait_for_condition(kube, namespace, "dead", "Healthy", "False")
        await wait_for_condition(kube, namespace, "ready", "Healthy", "True")

        api, auth = operator.discovery_url, {"Authorization": f"Bearer {operator.discovery_token}"}

        async def lease(role: str, target: str, ttl: int = 600) -> tuple[int, Any]:
            body = {"selector": {"role": role}, "target": target, "ttlSeconds": ttl}
            async with session.post(f"{api}/v1/leases", json=body, headers=auth) as response:
                return response.status, await response.json()

        async def offered() -> bool:
            # The discovery API reads the watch-fed fleet, a moment behind the API server;
            # listing is no lease request, so waiting here keeps the outcome counts exact.
            query = {"attr.role": "ready", "healthy": "true"}
            async with session.get(f"{api}/v1/proxies", params=query, headers=auth) as response:
                return bool((await response.json())["count"] == 1)

        await wait_for(offered, timeout=30)
        leases = []
        for target in ("a.example", "b.example", "c.example"):
            status, body = await lease("ready", target)
            assert status == 201, body
            leases.append(body)
        assert (await lease("ready", "d.example"))[0] == 409, "maxTargets is 3"
        assert (await lease("dead", "a.example"))[0] == 409, "an unhealthy proxy is never leased"
        assert (await lease("ready", "d.example", ttl=10**6))[0] == 400
        report = {"result": "rate_limited", "target": "a.example", "reason": "http_429"}
        async with session.post(
            f"{api}/v1/leases/{leases[0]['leaseId']}/report", json=report, headers=auth
        ) as response:
            assert response.status == 200

        async def orphan_gone() -> bool:
            return "orphan" not in await pod_names(kube, namespace)

        await wait_for(orphan_gone, timeout=30)

        async def settled() -> str | None:
            # The fleet cache (phases) and the GC counters lag the API server a little.
            text = await scrape(session, operator.metrics_url)
            samples = Scrape(text, (0, float("inf"))).samples
            phases = {
                labels[0][1]: value
                for (name, labels), value in samples.items()
                if name == "egress_proxies_proxies"
            }
            deleted = samples.get(
                _key(
                    "egress_proxies_gc_deletions_total", {"provider": "kubernetes", "kind": "pods"}
                )
            )
            ready = phases.get(Phase.READY) == 1 and phases.get(Phase.UNHEALTHY) == 1
            return text if ready and deleted == 1 else None

        text = await wait_for(settled, timeout=30, interval=0.5)
        scraped_at = time.time()

    check_every_series(Scrape(text, (started, scraped_at)), namespace, started, scraped_at)
    log = operator.log_text()
    assert "traceID=" not in log, "no OTEL_* variable is set, so no span records and no log ids"
    assert '"trace_id"' not in log, "no span is printed"


def check_every_series(scrape: Scrape, namespace: str, started: float, scraped_at: float) -> None:
    """The values the scenario implies, for each series; nothing else may be exported."""
    assert scrape.types == {
        **dict.fromkeys(GAUGES, "gauge"),
        **dict.fromkeys(COUNTERS, "counter"),
        **dict.fromkeys(HISTOGRAMS, "histogram"),
        **{f"{name}_created": "gauge" for name in (*COUNTERS, *HISTOGRAMS)},
        # Per-pool counters: declared, but this scenario has no ProxyPool, so no samples.
        **dict.fromkeys(POOL_COUNTERS, "counter"),
    }
    elapsed = scraped_at - started

    # Read at scrape time.
    for phase in Phase:
        expected = 1 if phase in (Phase.READY, Phase.UNHEALTHY) else 0
        assert scrape.gauge("egress_proxies_proxies", phase=phase.value) == expected, phase
    assert scrape.gauge("egress_proxies_leases_active") == 3
    assert scrape.gauge("egress_proxies_lease_cooldowns_active") == 1
    assert scrape.gauge("egress_proxies_targets_paused") == 0

    # Health probes: every probe of the dead port failed; the ready one never did.
    ready, dead = f"{namespace}/ready", f"{namespace}/dead"
    probes = {
        key: scrape.histogram(
            "egress_proxies_healthcheck_duration_seconds", DURATION_BUCKETS, proxy=key
        )
        for key in (ready, dead)
    }
    assert probes[ready].count >= 1
    assert probes[dead].count >= DEAD_CHECK["failureThreshold"]
    for key, check in ((ready, READY_CHECK), (dead, DEAD_CHECK)):
        assert 0 <= probes[key].sum <= probes[key].count * (check["timeoutSeconds"] + 1), key
    assert scrape.counter("egress_proxies_healthcheck_failures", proxy=ready) == 0
    assert scrape.counter("egress_proxies_healthcheck_failures", proxy=dead) == probes[dead].count
    finished = probes[ready].count + probes[dead].count
    lateness = scrape.histogram("egress_proxies_healthcheck_lateness_seconds", LATENESS_BUCKETS)
    # Lateness is observed when a probe starts: at most one per proxy is still in flight.
    assert finished <= lateness.count <= finished + 2
    assert 0 <= lateness.sum <= lateness.count * 10

    # The discovery API.
    outcomes = {"granted": 3, "no_match": 2, "rejected": 1}
    for outcome, count in outcomes.items():
        assert scrape.counter("egress_proxies_lease_requests", outcome=outcome) == count, outcome
    reported = {"result": "rate_limited", "reason": "http_429"}
    assert scrape.counter("egress_proxies_lease_reports", **reported) == 1
    assert scrape.counter("egress_proxies_target_pauses") == 0, "no ban storm"

    # One `up` for the managed Proxy; the External one has no stack.
    assert scrape.counter("egress_proxies_stack_operations", op="up", result="ok") == 1
    up = scrape.histogram("egress_proxies_stack_operation_duration_seconds", STACK_BUCKETS, op="up")
    assert up.count == 1 and 0 < up.sum < elapsed

    # The GC: one orphan pod deleted; every sweep listed once (the last may still be running).
    sweeps = scrape.histogram("egress_proxies_gc_sweep_duration_seconds", SWEEP_BUCKETS)
    lists = scrape.counter(
        "egress_proxies_provider_requests", provider="kubernetes", op="list", result="ok"
    )
    assert sweeps.count >= 1 and sweeps.count <= lists <= sweeps.count + 1
    assert 0 < sweeps.sum < elapsed
    deletes = scrape.counter(
        "egress_proxies_provider_requests", provider="kubernetes", op="delete", result="ok"
    )
    assert deletes == 1
    assert scrape.counter("egress_proxies_gc_deletions", provider="kubernetes", kind="pods") == 1
    assert started < scrape.gauge("egress_proxies_gc_last_sweep_timestamp_seconds") <= scraped_at

    assert scrape.samples == {}, f"series this test does not expect: {sorted(scrape.samples)}"
