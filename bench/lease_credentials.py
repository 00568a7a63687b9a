"""Lease credentials benchmark: a fetch with live lease credentials ÷ one with static ones.

    .venv/bin/python -m bench.lease_credentials [--leases 16] [--fetches 4000] [--rounds 9]
        [--concurrency 8] [--smoke]

Two real squid processes on loopback, configured by the project's own
`squid_conf`: one checks a static bcrypt passwd file (an External proxy's
credentials, and every managed proxy's before lease credentials), one runs
the lease-credentials helper with a signing key, pulling its revocation list
every second from a discovery API (the real app and memory store, in its own
process). `--leases` live leases are taken from that API, and each fetch
through the lease squid carries the next lease's credentials, so squid's
credential cache holds them all and the helper re-checks each one every two
seconds (`credentialsttl`), as it would for a fleet's crawlers. The origin
answers 204 from its own process. Rounds alternate the two squids, each
`--fetches` GETs from `--concurrency` keep-alive clients. The figure is what
a fetch costs the proxy: the CPU seconds of the squid process and everything
below it (its helpers, the helper's poller) per fetch, lease credentials ÷
static ones, median over rounds (target ≤ 1.1); the wall time per fetch as
the client saw it is printed beside it (it moves with the machine's load).
`--smoke`: a few hundred fetches, two rounds.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import multiprocessing
import secrets
import socket
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass

import aiohttp
from aiohttp import web

from egress_proxies.catalog import ProxyRecord, proxy_key
from egress_proxies.discovery import create_app
from egress_proxies.leases import LeaseLimits, MemoryLeaseStore
from egress_proxies.model import HealthCheck
from egress_proxies.values import ProxyCredentials
from harness.benchkit.cpu import process_table, total, tree
from harness.squid import SquidProcess, free_ports

SMOKE = {"leases": 4, "fetches": 200, "rounds": 2, "concurrency": 4}
TOKEN = secrets.token_urlsafe(24)
STATIC = ProxyCredentials("bench", secrets.token_urlsafe(16))
OPERATOR = ProxyCredentials("crawler", secrets.token_urlsafe(16), secrets.token_hex(32))
PROXY = proxy_key("bench", "door")

# The figures the report promises, each on a line of its own (tests/*/test_bench_smoke.py).
RATIO = "proxy CPU per fetch, lease credentials ÷ static credentials"
PER_FETCH = "proxy CPU per fetch, static / lease"
WALL = "wall time per fetch, lease ÷ static"
FIGURES = (RATIO, PER_FETCH, WALL)


def _serve_origin(port: int) -> None:
    async def no_content(_: web.Request) -> web.Response:
        return web.Response(status=204)

    app = web.Application()
    app.router.add_get("/generate_204", no_content)
    web.run_app(app, host="127.0.0.1", port=port, print=None, access_log=None)


def _serve_api(port: int, squid_port: int, operator: ProxyCredentials, token: str) -> None:
    record = ProxyRecord(
        key=PROXY,
        uid="uid-door",
        namespace="bench",
        name="door",
        scheme="http",
        host="127.0.0.1",
        port=squid_port,
        health_check=HealthCheck(),
        credentials=operator,
        healthy=True,
        max_leases=1_000,
    )

    class Fleet:
        def records(self) -> Sequence[ProxyRecord]:
            return (record,)

    store = MemoryLeaseStore(LeaseLimits())
    app = create_app(Fleet(), store, lambda: frozenset({token}))
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


def _authorization(username: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{username}:{password}".encode()).decode()


async def _leases(api: str, count: int) -> list[str]:
    """Proxy-Authorization values of `count` live leases (the API may still be starting)."""
    values: list[str] = []
    deadline = time.monotonic() + 30
    async with aiohttp.ClientSession() as session:
        while len(values) < count:
            try:
                async with session.post(
                    f"{api}/v1/leases",
                    json={"ttlSeconds": 3600},
                    headers={"Authorization": f"Bearer {TOKEN}"},
                ) as response:
                    body = await response.json()
                    if response.status != 201:
                        raise RuntimeError(f"no lease: {response.status} {body}")
                    credentials = body["proxy"]["credentials"]
                    values.append(_authorization(credentials["username"], credentials["password"]))
            except (aiohttp.ClientError, KeyError):
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.1)
    return values


@dataclass(frozen=True)
class Squid:
    """One squid to fetch through: its URL and the pid its process tree hangs from."""

    url: str
    pid: int

    def cpu_seconds(self) -> float:
        """CPU seconds of squid, its helpers and theirs (live and reaped), so far."""
        table = process_table()
        return total(table, tree(table, self.pid))


async def _round(
    squid: Squid, url: str, headers: Sequence[str], fetches: int, clients: int
) -> tuple[float, float]:
    """(squid CPU, wall) seconds per fetch: `fetches` GETs, each with the next header."""
    proxy = squid.url
    turn = iter(range(fetches))

    async def client(session: aiohttp.ClientSession) -> None:
        for index in turn:
            auth = {"Proxy-Authorization": headers[index % len(headers)]}
            async with session.get(url, proxy=proxy, headers=auth) as response:
                assert response.status == 204, (proxy, response.status)

    async with aiohttp.ClientSession() as session:
        cpu, start = squid.cpu_seconds(), time.perf_counter()
        await asyncio.gather(*(client(session) for _ in range(clients)))
        wall = time.perf_counter() - start
        return (squid.cpu_seconds() - cpu) / fetches, wall / fetches


async def bench(static: Squid, lease: Squid, api: str, url: str, args: argparse.Namespace) -> None:
    """Warm both squids, then alternate rounds and print the median ratios."""
    leases = await _leases(api, args.leases)
    static_headers = [_authorization(STATIC.username, STATIC.password)]
    for squid, headers in ((static, static_headers), (lease, leases)):
        await _round(squid, url, headers, min(args.fetches, 100), args.concurrency)
    cpu: dict[str, list[float]] = {"static": [], "lease": []}
    wall: dict[str, list[float]] = {"static": [], "lease": []}
    for _ in range(args.rounds):
        for name, squid, headers in (("static", static, static_headers), ("lease", lease, leases)):
            cpu_per_fetch, wall_per_fetch = await _round(
                squid, url, headers, args.fetches, args.concurrency
            )
            cpu[name].append(cpu_per_fetch)
            wall[name].append(wall_per_fetch)
    median = statistics.median
    print(f"{RATIO}: {median(cpu['lease']) / median(cpu['static']):.3f} (target ≤ 1.1)")
    print(
        f"{PER_FETCH}: {median(cpu['static']) * 1e6:.0f} µs / "
        f"{median(cpu['lease']) * 1e6:.0f} µs (median rounds)"
    )
    print(
        f"{WALL}: {median(wall['lease']) / median(wall['static']):.3f} "
        f"({median(wall['static']) * 1000:.3f} ms / {median(wall['lease']) * 1000:.3f} ms; "
        "moves with the machine's load)"
    )


def main() -> None:
    """Start the origin, the API and both squids, run the benchmark, stop everything."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--leases", type=int, default=16)
    parser.add_argument("--fetches", type=int, default=4000)
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--smoke", action="store_true", help=f"a quick run: {SMOKE}")
    args = parser.parse_args()
    if args.smoke:
        vars(args).update(SMOKE)

    origin_port, api_port = free_ports(2)
    api = f"http://127.0.0.1:{api_port}"
    revocations = f"{api}/v1/proxies/{PROXY}/revocations"
    spawn = multiprocessing.get_context("spawn")
    with (
        SquidProcess(credentials=STATIC) as static_squid,
        SquidProcess(
            credentials=OPERATOR, lease_proxy=PROXY, revocations_url=revocations
        ) as lease_squid,
    ):
        children = [
            spawn.Process(target=_serve_origin, args=(origin_port,), daemon=True),
            spawn.Process(
                target=_serve_api,
                args=(api_port, lease_squid.ports[0], OPERATOR, TOKEN),
                daemon=True,
            ),
        ]
        for child in children:
            child.start()
        try:
            print(
                f"{args.leases} live leases, {args.fetches} fetches per round from "
                f"{args.concurrency} clients, {args.rounds} rounds per squid; origin and API "
                "in their own processes"
            )
            _wait_accepting(origin_port)
            url = f"http://127.0.0.1:{origin_port}/generate_204"
            static = Squid(static_squid.proxy_urls[0], static_squid.pid)
            lease = Squid(lease_squid.proxy_urls[0], lease_squid.pid)
            asyncio.run(bench(static, lease, api, url, args))
        finally:
            for child in children:
                child.terminate()
                child.join(5)


if __name__ == "__main__":
    main()
