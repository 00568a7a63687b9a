"""Health engine benchmark: a fleet of real squid proxies probed at its interval.

    .venv/bin/python -m bench.health [--proxies 1000] [--interval 10] [--seconds 60]
        [--bare-seconds 20] [--smoke]

Runs ceil(proxies / 125) authenticated squid processes (one credential per
fleet, as the bcrypt check is squid's cost, not ours) on loopback and an
origin in a separate process that answers 204, then measures, in this one
process and one run:

1. a bare aiohttp loop: one GET through each proxy in turn, paced at the
   fleet's probe rate, a fresh connection per request (as the prober does);
2. the health engine probing the same proxies at `--interval`, after a
   warm-up of two intervals (a never-probed fleet probes at once, then
   spreads over its interval).

It prints operator CPU per probe ÷ bare-loop CPU per request (target ≤ 1.5),
schedule lateness p99 (target ≤ 1 s) and total CPU as % of one core.
`--smoke`: 10 proxies every second, a few seconds each phase.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import math
import multiprocessing
import socket
import statistics
import time
from collections.abc import Sequence
from contextlib import ExitStack
from dataclasses import dataclass

import aiohttp
from aiohttp import web
from prometheus_client import CollectorRegistry

from egress_proxies.catalog import ProxyKey, ProxyRecord, proxy_key
from egress_proxies.clock import SystemClock
from egress_proxies.health import HealthEngine, HealthReport, HttpProber
from egress_proxies.model import HealthCheck
from egress_proxies.stacks.inputs import ProxyCredentials
from egress_proxies.telemetry.probe_metrics import PrometheusProbeMetrics
from harness.squid import SquidProcess, free_ports

PORTS_PER_SQUID = 125
SMOKE = {"proxies": 10, "interval": 1, "seconds": 2.0, "bare_seconds": 1.0}

# The figures the report promises, each on a line of its own (tests/*/test_bench_smoke.py).
CPU_RATIO = "CPU per probe ÷ CPU per bare request"
LATENESS = "schedule lateness p50 / p99 / max"
TOTAL_CPU = "total CPU while probing"
FIGURES = (CPU_RATIO, LATENESS, TOTAL_CPU)
CREDENTIALS = ProxyCredentials("bench", "bench-password")
AUTHORIZATION = {
    "Proxy-Authorization": "Basic "
    + base64.b64encode(f"{CREDENTIALS.username}:{CREDENTIALS.password}".encode()).decode()
}


def _serve_origin(port: int) -> None:
    async def no_content(_: web.Request) -> web.Response:
        return web.Response(status=204)

    app = web.Application()
    app.router.add_get("/generate_204", no_content)
    web.run_app(app, host="127.0.0.1", port=port, print=None, access_log=None)


def _wait_accepting(port: int, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"the origin did not start on port {port}")


class RecordingMetrics:
    """The real Prometheus recorder, plus raw lateness samples and counts for the report."""

    def __init__(self) -> None:
        self.inner = PrometheusProbeMetrics(CollectorRegistry())
        self.lateness: list[float] = []
        self.probes = 0
        self.failures = 0

    def observe_probe(self, key: ProxyKey, seconds: float, *, ok: bool) -> None:
        self.inner.observe_probe(key, seconds, ok=ok)
        self.probes += 1
        self.failures += not ok

    def observe_lateness(self, seconds: float) -> None:
        self.inner.observe_lateness(seconds)
        self.lateness.append(seconds)

    def forget(self, key: ProxyKey) -> None:
        self.inner.forget(key)


@dataclass(frozen=True)
class Phase:
    """CPU and wall seconds of one measured phase, and how many requests it completed."""

    cpu: float
    wall: float
    requests: int

    @property
    def cpu_per_request(self) -> float:
        """CPU seconds per completed request."""
        return self.cpu / self.requests


async def bare_loop(proxies: Sequence[str], url: str, rate: float, seconds: float) -> Phase:
    """GET `url` through each proxy in turn at `rate` per second, fresh connection each time."""
    loop = asyncio.get_running_loop()
    count = int(rate * seconds)
    failures = 0

    async def request(session: aiohttp.ClientSession, proxy: str) -> None:
        nonlocal failures
        try:
            async with session.get(url, proxy=proxy, headers=AUTHORIZATION) as response:
                failures += response.status != 204
        except aiohttp.ClientError:
            failures += 1

    connector = aiohttp.TCPConnector(force_close=True, limit=0)
    async with aiohttp.ClientSession(connector=connector) as session:
        cpu, start = time.process_time(), loop.time()
        tasks = set()
        for index in range(count):
            await asyncio.sleep(max(0.0, start + index / rate - loop.time()))
            task = asyncio.create_task(request(session, proxies[index % len(proxies)]))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
        await asyncio.gather(*tasks)
        phase = Phase(time.process_time() - cpu, loop.time() - start, count)
    if failures:
        raise RuntimeError(f"{failures} bare-loop requests failed")
    return phase


async def engine_run(
    records: list[ProxyRecord], interval: float, seconds: float
) -> tuple[Phase, list[float], int]:
    """Run the engine: warm up for two intervals, then measure `seconds`."""
    metrics = RecordingMetrics()
    reports: list[HealthReport] = []

    class Catalog:
        def records(self) -> list[ProxyRecord]:
            """The fixed fleet."""
            return records

    async with HttpProber() as prober:
        engine = HealthEngine(Catalog(), reports.append, prober, SystemClock(), metrics)
        task = asyncio.create_task(engine.run())
        await asyncio.sleep(2 * interval)
        probes, late_from = metrics.probes, len(metrics.lateness)
        cpu, wall = time.process_time(), time.monotonic()
        await asyncio.sleep(seconds)
        phase = Phase(time.process_time() - cpu, time.monotonic() - wall, metrics.probes - probes)
        lateness = metrics.lateness[late_from:]
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    print(f"  engine: {engine!r}, {len(reports)} reports, {metrics.failures} failed probes")
    return phase, lateness, metrics.failures


def percentile(values: list[float], fraction: float) -> float:
    """The nearest-rank percentile."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, math.ceil(fraction * len(ordered)) - 1)]


async def bench(
    proxies: list[tuple[str, int]], url: str, interval: float, seconds: float, bare_seconds: float
) -> None:
    """Both phases over the same proxies, then the report."""
    rate = len(proxies) / interval
    urls = [f"http://{host}:{port}" for host, port in proxies]
    check = HealthCheck(url=url, interval_seconds=int(interval), expected_status=204)
    records = [
        ProxyRecord(
            key=proxy_key("bench", f"p{index}"),
            uid=f"uid-{index}",
            namespace="bench",
            name=f"p{index}",
            scheme="http",
            host=host,
            port=port,
            health_check=check,
            credentials=CREDENTIALS,
        )
        for index, (host, port) in enumerate(proxies)
    ]
    await bare_loop(urls, url, rate, 2)  # warm squid's credential caches and the code paths
    print(f"bare aiohttp loop: {rate:.0f} requests/s for {bare_seconds:g} s ...")
    bare = await bare_loop(urls, url, rate, bare_seconds)
    print(f"health engine: {len(proxies)} proxies every {interval:g} s, {seconds:g} s measured ...")
    engine, lateness, failures = await engine_run(records, interval, seconds)

    ratio = engine.cpu_per_request / bare.cpu_per_request
    print()
    print(
        f"bare loop      : {bare.requests} requests, {bare.cpu_per_request * 1e3:.3f} ms CPU each"
    )
    print(
        f"engine         : {engine.requests} probes ({engine.requests / engine.wall:.1f}/s), "
        f"{engine.cpu_per_request * 1e3:.3f} ms CPU each, {failures} failed"
    )
    print(f"{CPU_RATIO} : {ratio:.2f}   (target ≤ 1.5)")
    p50, p99 = statistics.median(lateness), percentile(lateness, 0.99)
    print(
        f"{LATENESS}    : {p50 * 1e3:.1f} / {p99 * 1e3:.1f} / "
        f"{max(lateness) * 1e3:.1f} ms   (target p99 ≤ 1 s)"
    )
    print(f"{TOTAL_CPU}              : {100 * engine.cpu / engine.wall:.1f}% of one core")


def main() -> None:
    """Start the origin and the squids, run the benchmark, stop everything."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--proxies", type=int, default=1000)
    parser.add_argument("--interval", type=int, default=10)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--bare-seconds", type=float, default=20.0)
    parser.add_argument("--smoke", action="store_true", help=f"a quick run: {SMOKE}")
    args = parser.parse_args()
    if args.smoke:
        vars(args).update(SMOKE)

    [origin_port] = free_ports(1)
    origin = multiprocessing.get_context("spawn").Process(
        target=_serve_origin, args=(origin_port,), daemon=True
    )
    origin.start()
    try:
        _wait_accepting(origin_port)
        with ExitStack() as stack:
            squids = [
                stack.enter_context(
                    SquidProcess(
                        ports=min(PORTS_PER_SQUID, args.proxies - first), credentials=CREDENTIALS
                    )
                )
                for first in range(0, args.proxies, PORTS_PER_SQUID)
            ]
            # Interleaved, so that any run of consecutive proxies spans every squid.
            proxies = [
                (squid.host, squid.ports[index])
                for index in range(PORTS_PER_SQUID)
                for squid in squids
                if index < len(squid.ports)
            ]
            print(
                f"{len(proxies)} proxies on {len(squids)} "
                "authenticated squid processes; origin answers 204 in its own process"
            )
            url = f"http://127.0.0.1:{origin_port}/generate_204"
            asyncio.run(bench(proxies, url, args.interval, args.seconds, args.bare_seconds))
    finally:
        origin.terminate()
        origin.join(5)


if __name__ == "__main__":
    main()
