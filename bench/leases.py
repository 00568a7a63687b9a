"""Discovery API benchmark: lease + release throughput and latency over loopback HTTP.

    .venv/bin/python -m bench.leases [--clients 64] [--pairs 40] [--rounds 5] [--profile [N]]
        [--smoke]

A server process (as in production, where crawlers run elsewhere) serves a
trivial aiohttp handler and the discovery API over 100, 1,000 and 10,000
indexed proxies, set up as the operator sets it up: bearer tokens from a token
directory (a mounted Secret), lease metrics on a registry, and the tracing
middlewares the operator installs (none while tracing is off, as here). This process
runs `--clients` concurrent clients against each in turn, each client a
keep-alive connection doing a fixed number of requests, for `--rounds`
interleaved rounds. The clients speak minimal HTTP/1.1 over asyncio streams, so
that the server and not the load generator is what gets measured. From that one run it prints:

- lease+release pairs/s at 1,000 proxies ÷ trivial requests/s (target ≥ 0.5).
  A pair is two requests, so this ratio cannot exceed 0.5; the per-request
  ratio (lease API requests/s ÷ trivial requests/s) is printed beside it;
- p99 lease latency at 1,000 proxies as the clients see it (target ≤ 10 ms),
  beside the trivial handler's p99 under the same 64 clients (queueing on one
  event loop bounds both) and the lease request's p99 inside the server
  (the whole route: authentication, handler, error answer), timed on a
  separate 1,000-proxy app after the measured rounds, so the timing's own
  cost is not in the CPU figures;
- pairs/s at 10,000 proxies ÷ at 100 (target ≥ 0.7);
- what aiohttp alone costs for the same two requests (the floor): a third app
  whose POST /v1/leases only reads the body and answers 201 with a granted
  lease's body (rendered once), and whose DELETE /v1/leases/{lease_id} answers
  204, with no authentication, validation or store; its CPU per request ÷ the
  trivial one says how much of the lease ratio is the request's shape (a body
  to read, a dynamic route, a bigger answer), and the lease API ÷ the floor
  what the product's code adds to it;
- pairs/s with the Redis lease store ÷ the memory store, both over 1,000
  proxies in the same server process (target ≥ 0.6), against a real
  redis-server started here on loopback; beside it the CPU per pair of the
  server process and of redis-server;
- round trips to Redis per acquire and per release (target 1 each), counted
  with MONITOR over a separate batch of pairs.

Each ratio is given twice: from wall-clock throughput, and from the server
process's CPU time per request or pair, which a busy machine disturbs far less.
Both are medians over the rounds. Beside each scenario's CPU: the kernel's share
of it and the cyclic garbage collector's (timed through `gc.callbacks`; a full
collection lands in whichever round is running, so it shows in one round's
figure and the median mostly leaves it out).

`--smoke`: 4 clients, 5 pairs each, one round, in seconds.

`--profile` then runs one more round of lease+release pairs at 1,000 proxies
and one of trivial requests, each under cProfile in the server process (after
the measured rounds, so the numbers above stay unprofiled), and prints each
profile's top N functions (default 25) by own time and by cumulative time.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import gc
import io
import json
import multiprocessing
import pstats
import resource
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from pathlib import Path

from aiohttp import web
from aiohttp.typedefs import Handler
from prometheus_client import CollectorRegistry

from egress_proxies.catalog import ProxyRecord, proxy_key
from egress_proxies.discovery import create_app
from egress_proxies.discovery.responses import GrantedBodies
from egress_proxies.discovery.token_files import TokenDirectory
from egress_proxies.leases import (
    Lease,
    LeaseId,
    LeaseStore,
    MemoryLeaseStore,
    Pace,
    RedisLeaseStore,
)
from egress_proxies.model import HealthCheck
from egress_proxies.stacks.inputs import ProxyCredentials
from egress_proxies.telemetry.lease_metrics import LeaseMetrics
from egress_proxies.telemetry.tracing import Spans
from harness.benchkit.lease_client import TOKEN, Client
from harness.redis import RedisServer

FLEET_SIZES = (100, 1_000, 10_000)
SMOKE = {"clients": 4, "pairs": 5, "rounds": 1}

# The figures the report promises, each on a line of its own (tests/*/test_bench_smoke.py).
PAIRS_RATIO = "pairs ÷ trivial requests"
REQUEST_CPU = "lease API request CPU ÷ trivial"
SCALING = "10,000 ÷ 100 proxies"
LEASE_P99 = "lease, as clients see it"
FLOOR_RATIO = "aiohttp alone ÷ trivial"
REDIS_RATIO = "pairs/s (≥ 0.6)"
ROUND_TRIPS = "round trips to Redis per acquire + release"
FIGURES = (PAIRS_RATIO, REQUEST_CPU, SCALING, LEASE_P99, FLOOR_RATIO, REDIS_RATIO, ROUND_TRIPS)
REDIS = "redis"  # the 1,000-proxy app over the Redis store
TIMED = "timed"  # the 1,000-proxy app with the in-server timing, measured on its own
FLOOR = "floor"  # aiohttp alone answering the lease and release requests' shapes
FLOOR_LEASE_ID = LeaseId("A" * 22)
ROUND_TRIP_PAIRS = 50
LEASE_BODY = json.dumps(
    {"selector": {"pool": "bench"}, "ttlSeconds": 300, "target": "example.com"}
).encode()


def fleet(size: int) -> tuple[ProxyRecord, ...]:
    """Healthy exclusive proxies, all in the bench pool, with spread latencies."""
    return tuple(
        ProxyRecord(
            key=proxy_key("bench", f"p{index:05d}"),
            uid=f"uid-{index}",
            namespace="bench",
            name=f"p{index:05d}",
            scheme="http",
            host=f"10.{index // 65536}.{index // 256 % 256}.{index % 256}",
            port=3128,
            health_check=HealthCheck(),
            attributes={"pool": "bench", "region": ("eu", "us")[index % 2]},
            credentials=ProxyCredentials(f"user{index}", "password"),
            healthy=True,
            latency_millis=20 + index % 50,
        )
        for index in range(size)
    )


@dataclass(frozen=True)
class FixedCatalog:
    """One unchanging snapshot, so the discovery index is built once."""

    snapshot: tuple[ProxyRecord, ...]

    def records(self) -> Sequence[ProxyRecord]:
        """The fleet."""
        return self.snapshot


def serve(conn: Connection, redis_url: str) -> None:
    """Child process: serve every app on its own port; report CPU and lease handler times.

    Commands: "cpu" (process CPU seconds: user, system, and of it in the cyclic garbage
    collector), "handler-times" (and clear them),
    "profile" (start cProfile), "profile-stats N" (stop it, send its top N), "stop".
    """
    with tempfile.TemporaryDirectory() as tokens_dir:
        (Path(tokens_dir) / "bench").write_text(TOKEN)
        asyncio.run(_serve(conn, Path(tokens_dir), redis_url))


class GcClock:
    """CPU seconds the thread running a collection spent in Python's cyclic garbage collector.

    A `gc.callbacks` entry: a collection runs on one thread from its "start" to its
    "stop" callback, so that thread's CPU time between the two is the collection's.
    """

    def __init__(self) -> None:
        self.seconds = 0.0
        self._started = 0.0

    def __repr__(self) -> str:
        return f"<GcClock [{self.seconds:.3f} s]>"

    def __call__(self, phase: str, _: dict[str, int]) -> None:
        if phase == "start":
            self._started = time.thread_time()
        else:
            self.seconds += time.thread_time() - self._started


def profile_report(profile: cProfile.Profile, top: int) -> str:
    """The profile's top functions by own time, then by cumulative time."""
    out = io.StringIO()
    stats = pstats.Stats(profile, stream=out).strip_dirs()
    for order in (pstats.SortKey.TIME, pstats.SortKey.CUMULATIVE):
        stats.sort_stats(order).print_stats(top)
    return out.getvalue()


def _apps(
    tokens_dir: Path, handler_seconds: list[float], redis_url: str
) -> tuple[dict[str, web.Application], dict[str, LeaseStore]]:
    """A trivial app (the baseline), one discovery app per fleet size, one on Redis."""

    @web.middleware
    async def time_leases(request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.method != "POST":
            return await handler(request)
        started = time.perf_counter()
        response = await handler(request)
        handler_seconds.append(time.perf_counter() - started)
        return response

    async def trivial(_: web.Request) -> web.Response:
        return web.Response(text="ok")

    trivial_app = web.Application()
    trivial_app.router.add_get("/", trivial)
    apps: dict[str, web.Application] = {"trivial": trivial_app, FLOOR: floor_app()}
    stores: dict[str, LeaseStore] = {str(size): MemoryLeaseStore() for size in FLEET_SIZES}
    stores[REDIS] = RedisLeaseStore(redis_url, prefix="bench", timeout=1.0)
    stores[TIMED] = MemoryLeaseStore()
    for name, store in stores.items():
        size = int(name) if name.isdigit() else 1_000
        # As the operator sets it up: tracing middlewares (none: no OTEL_* variables), token
        # directory, lease metrics. Only the timed app adds the timing (innermost of the
        # given middlewares, around the whole route: authentication, error answer,
        # handler), so the CPU measured on the others is the product's alone.
        middlewares = Spans().server_middlewares() + ([time_leases] if name == TIMED else [])
        apps[name] = create_app(
            FixedCatalog(fleet(size)),
            store,
            TokenDirectory(tokens_dir),
            metrics=LeaseMetrics(CollectorRegistry(), store),
            middlewares=middlewares,
        )
    return apps, stores


def floor_app() -> web.Application:
    """The lease and release requests' shapes with nothing of the product behind them."""
    record = fleet(1)[0]
    granted = (
        GrantedBodies()
        .render(
            Lease(
                FLOOR_LEASE_ID,
                record,
                "example.com",
                300,
                time.time() + 300,
                pace=Pace(rate=1.0, burst=1, lowered_at=None),
            )
        )
        .encode()
    )
    headers = {"Content-Type": "application/json; charset=utf-8"}

    async def lease(request: web.Request) -> web.Response:
        await request.read()
        return web.Response(body=granted, status=201, headers=headers)

    async def release(request: web.Request) -> web.Response:
        assert request.match_info["lease_id"]
        return web.Response(status=204)

    app = web.Application()
    app.router.add_post("/v1/leases", lease)
    app.router.add_delete("/v1/leases/{lease_id}", release)
    return app


async def _serve(conn: Connection, tokens_dir: Path, redis_url: str) -> None:
    handler_seconds: list[float] = []
    apps, stores = _apps(tokens_dir, handler_seconds, redis_url)
    ports: dict[str, int] = {}
    runners = []
    for name, app in apps.items():
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        ports[name] = runner.addresses[0][1]
        runners.append(runner)
    conn.send(ports)
    loop = asyncio.get_running_loop()
    profile = cProfile.Profile()
    in_gc = GcClock()
    gc.callbacks.append(in_gc)
    while (command := await loop.run_in_executor(None, conn.recv)) != "stop":
        if command == "cpu":
            # getrusage, not os.times: its sum is the scheduler's nanosecond count, where
            # os.times counts 10 ms clock ticks (7% of a round of 5,120 trivial requests).
            usage = resource.getrusage(resource.RUSAGE_SELF)
            conn.send((usage.ru_utime, usage.ru_stime, in_gc.seconds))
        elif command == "profile":
            # Enabled here, on the event loop's thread: the executor thread is not profiled.
            profile = cProfile.Profile()
            profile.enable()
            conn.send(None)
        elif command.startswith("profile-stats"):
            profile.disable()
            conn.send(profile_report(profile, int(command.split()[1])))
        else:
            conn.send(list(handler_seconds))
            handler_seconds.clear()
    for runner in runners:
        await runner.cleanup()
    for store in stores.values():
        await store.close()


Work = Callable[[Client], Awaitable[None]]


async def run_clients(port: int, clients: int, steps: int, work: Work) -> float:
    """Seconds for `clients` connections to each run `work` `steps` times."""
    connections = [await Client.connect(port) for _ in range(clients)]

    async def client(connection: Client) -> None:
        for _ in range(steps):
            await work(connection)

    started = time.perf_counter()
    await asyncio.gather(*(client(connection) for connection in connections))
    elapsed = time.perf_counter() - started
    for connection in connections:
        connection.close()
    return elapsed


def trivial_get(latencies: list[float]) -> Work:
    """GET the trivial handler, recording each latency."""

    async def get(client: Client) -> None:
        started = time.perf_counter()
        status, _ = await client.request("GET", "/")
        latencies.append(time.perf_counter() - started)
        assert status == 200

    return get


def lease_and_release(latencies: list[float]) -> Work:
    """Lease (recording its latency), then release."""

    async def pair(client: Client) -> None:
        started = time.perf_counter()
        status, body = await client.request("POST", "/v1/leases", LEASE_BODY)
        latencies.append(time.perf_counter() - started)
        assert status == 201, body
        status, _ = await client.request("DELETE", f"/v1/leases/{json.loads(body)['leaseId']}")
        assert status == 204

    return pair


def p99(samples: list[float]) -> float:
    """The 99th percentile."""
    return statistics.quantiles(samples, n=100)[98]


@dataclass
class Scenario:
    """Throughput and server CPU seconds per unit (request or pair) over the rounds."""

    rates: list[float] = field(default_factory=list)
    cpu_per_unit: list[float] = field(default_factory=list)
    kernel_per_unit: list[float] = field(default_factory=list)
    gc_per_unit: list[float] = field(default_factory=list)

    @property
    def rate(self) -> float:
        """Median units/s."""
        return statistics.median(self.rates)

    @property
    def cpu(self) -> float:
        """Median server CPU seconds per unit."""
        return statistics.median(self.cpu_per_unit)

    @property
    def kernel(self) -> str:
        """The median share of that CPU spent in the kernel (sending, receiving, waking)."""
        return f"{statistics.median(self.kernel_per_unit) / self.cpu:8.0%}"

    @property
    def in_gc(self) -> str:
        """The median share of that CPU spent in Python's cyclic garbage collector."""
        return f"{statistics.median(self.gc_per_unit) / self.cpu:7.0%}"

    def row(self, label: str) -> str:
        """Units/s, CPU per unit and its kernel and GC shares, under `label`."""
        return f"{label:24}{self.rate:12.0f}{self.cpu * 1e6:15.0f} µs{self.kernel}{self.in_gc}"


def measure(
    ports: dict[str, int], conn: Connection, args: argparse.Namespace, redis: RedisServer
) -> None:
    """Warm up, run the rounds, print the results."""
    trivial = Scenario()
    pairs = {size: Scenario() for size in FLEET_SIZES}
    on_redis = Scenario()
    floor = Scenario()
    redis_cpu: list[float] = []
    trivial_latency: list[float] = []
    lease_latency: list[float] = []

    def server_cpu() -> tuple[float, float, float]:
        conn.send("cpu")
        user_system_gc: tuple[float, float, float] = conn.recv()
        return user_system_gc

    async def run(scenario: Scenario, port: int, steps: int, work: Work) -> None:
        user, system, in_gc = server_cpu()
        seconds = await run_clients(port, args.clients, steps, work)
        units = args.clients * steps
        user_after, system_after, in_gc_after = server_cpu()
        scenario.cpu_per_unit.append((user_after + system_after - user - system) / units)
        scenario.kernel_per_unit.append((system_after - system) / units)
        scenario.gc_per_unit.append((in_gc_after - in_gc) / units)
        scenario.rates.append(units / seconds)

    async def rounds() -> None:
        await run_clients(ports["trivial"], args.clients, 5, trivial_get([]))
        await run_clients(ports[FLOOR], args.clients, 5, lease_and_release([]))
        for size in FLEET_SIZES:
            await run_clients(ports[str(size)], args.clients, 5, lease_and_release([]))
        await run_clients(ports[REDIS], args.clients, 5, lease_and_release([]))
        for _ in range(args.rounds):
            await run(trivial, ports["trivial"], 2 * args.pairs, trivial_get(trivial_latency))
            await run(floor, ports[FLOOR], args.pairs, lease_and_release([]))
            for size in FLEET_SIZES:
                latencies = lease_latency if size == 1_000 else []
                await run(pairs[size], ports[str(size)], args.pairs, lease_and_release(latencies))
            before = redis.cpu_seconds()
            await run(on_redis, ports[REDIS], args.pairs, lease_and_release([]))
            redis_cpu.append((redis.cpu_seconds() - before) / (args.clients * args.pairs))
        # The in-server latency: the same load on the timed app, after a warm-up.
        await run_clients(ports[TIMED], args.clients, 5, lease_and_release([]))
        conn.send("handler-times")
        conn.recv()
        steps = args.rounds * args.pairs  # as many requests as the measured rounds made
        await run_clients(ports[TIMED], args.clients, steps, lease_and_release([]))

    async def round_trips() -> list[str]:
        async def batch() -> None:
            await run_clients(ports[REDIS], 1, ROUND_TRIP_PAIRS, lease_and_release([]))

        return await redis.commands_sent(batch)

    asyncio.run(rounds())
    sent = asyncio.run(round_trips())
    conn.send("handler-times")
    handler_times: list[float] = conn.recv()
    report(args, trivial, pairs, trivial_latency, lease_latency, handler_times)
    report_floor(trivial, floor, pairs[1_000])
    report_redis(pairs[1_000], on_redis, statistics.median(redis_cpu), sent)
    if args.profile:
        profile_rounds(ports, conn, args)


def profile_rounds(ports: dict[str, int], conn: Connection, args: argparse.Namespace) -> None:
    """One lease+release round and one trivial round, each under cProfile in the server."""
    profiled = (
        ("lease+release pairs, 1,000 proxies", "1000", lease_and_release([])),
        ("trivial requests", "trivial", trivial_get([])),
    )
    for title, name, work in profiled:
        steps = args.pairs if name == "1000" else 2 * args.pairs
        conn.send("profile")
        conn.recv()
        asyncio.run(run_clients(ports[name], args.clients, steps, work))
        conn.send(f"profile-stats {args.profile}")
        print(f"\nserver profile: {title}, {args.clients} clients x {steps}")
        print(conn.recv())


def report(
    args: argparse.Namespace,
    trivial: Scenario,
    pairs: dict[int, Scenario],
    trivial_latency: list[float],
    lease_latency: list[float],
    handler_times: list[float],
) -> None:
    """Print the rates, CPU per unit, ratios and latencies."""
    thousand = pairs[1_000]
    print(f"{args.clients} clients, {args.rounds} rounds, loopback, server in its own process")
    print(f"{'':24}{'per second':>12}{'server CPU each':>18}{'in kernel':>10}{'in GC':>7}")
    print(trivial.row("trivial request"))
    for size, scenario in pairs.items():
        print(scenario.row(f"lease+release, {size:,}"))
    print("ratios (1,000 proxies)            wall clock   server CPU")
    print(
        f"  {PAIRS_RATIO} (≥ 0.5)    {thousand.rate / trivial.rate:5.2f}"
        f"       {trivial.cpu / thousand.cpu:5.2f}   (a pair is 2 requests: at most 0.5)"
    )
    print(
        f"  per request ÷ trivial               {2 * thousand.rate / trivial.rate:5.2f}"
        f"       {2 * trivial.cpu / thousand.cpu:5.2f}"
    )
    print(
        f"  {REQUEST_CPU} (≤ 1.5)         {thousand.cpu / (2 * trivial.cpu):5.2f}"
        "   (the per-request ratio inverted)"
    )
    print(
        f"  {SCALING} (≥ 0.7)        {pairs[10_000].rate / pairs[100].rate:5.2f}"
        f"       {pairs[100].cpu / pairs[10_000].cpu:5.2f}"
    )
    print("p99 latency (1,000 proxies)")
    print(f"  {LEASE_P99} (≤ 10 ms)  {p99(lease_latency) * 1e3:6.2f} ms")
    print(f"  trivial, as clients see it          {p99(trivial_latency) * 1e3:6.2f} ms")
    print(f"  lease route, inside the server      {p99(handler_times) * 1e3:6.2f} ms")


def report_floor(trivial: Scenario, floor: Scenario, thousand: Scenario) -> None:
    """Print what aiohttp alone costs for the same requests, and what the product adds."""
    print(floor.row("aiohttp alone, a pair"))
    print("server CPU per request, same requests (1,000 proxies)")
    print(
        f"  {FLOOR_RATIO} (the floor)          {floor.cpu / (2 * trivial.cpu):5.2f}"
        "   (a body to read, a dynamic route, a bigger answer)"
    )
    print(
        f"  lease API ÷ aiohttp alone                    {thousand.cpu / floor.cpu:5.2f}"
        f"   (the product's code: {(thousand.cpu - floor.cpu) / 2 * 1e6:.0f} µs a request)"
    )


def report_redis(memory: Scenario, on_redis: Scenario, redis_cpu: float, sent: list[str]) -> None:
    """Print the Redis store against the memory store, and the round trips it took."""
    label = "lease+release, Redis"
    print(
        f"{label:24}{on_redis.rate:12.0f}{on_redis.cpu * 1e6:15.0f} µs"
        f"   + redis-server {redis_cpu * 1e6:.0f} µs"
    )
    print("Redis store ÷ memory store (1,000 proxies)  wall clock   server CPU")
    print(
        f"  {REDIS_RATIO}                            {on_redis.rate / memory.rate:5.2f}"
        f"       {memory.cpu / on_redis.cpu:5.2f}"
        f"   (with redis-server's CPU: {memory.cpu / (on_redis.cpu + redis_cpu):.2f})"
    )
    evalsha = sent.count("EVALSHA")
    others = sorted(set(sent) - {"EVALSHA"})
    print(
        f"{ROUND_TRIPS}: {len(sent) / ROUND_TRIP_PAIRS:.2f} "
        f"({evalsha} EVALSHA for {ROUND_TRIP_PAIRS} pairs; target 2: one each)"
        + (f"; also {others}" if others else "")
    )


def main() -> None:
    """Parse arguments, start the server process, measure, stop it."""
    parser = argparse.ArgumentParser(description="Discovery API lease benchmark.")
    parser.add_argument("--clients", type=int, default=64)
    parser.add_argument("--pairs", type=int, default=40, help="pairs per client per round")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument(
        "--profile",
        type=int,
        nargs="?",
        const=25,
        default=0,
        metavar="N",
        help="then profile the server (cProfile) and print its top N functions",
    )
    parser.add_argument("--smoke", action="store_true", help=f"a quick run: {SMOKE}")
    args = parser.parse_args()
    if args.smoke:
        vars(args).update(SMOKE)
    ours, theirs = multiprocessing.Pipe()
    with RedisServer() as redis:
        server = multiprocessing.get_context("spawn").Process(
            target=serve, args=(theirs, redis.url)
        )
        server.start()
        try:
            measure(ours.recv(), ours, args, redis)
        finally:
            ours.send("stop")
            server.join(timeout=10)
            if server.is_alive():
                server.kill()


if __name__ == "__main__":
    main()
