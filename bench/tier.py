"""Discovery tier benchmark: lease+release throughput of two replicas ÷ one, over one Redis.

    .venv/bin/python -m bench.tier [--clients 64] [--seconds 5] [--rounds 3] [--smoke]
        [--cluster STATE_DIR]

Starts a dev cluster (or uses the running one `--cluster` names), 40
healthy External Proxies (maxLeases 1000, so the measure is the request
path and not 409 retries), one redis-server and two
`egress-proxies discovery` processes reading the fleet through their watch.
This process runs `--clients` keep-alive clients (minimal HTTP/1.1, the
bench.leases client) doing POST /v1/leases + DELETE for `--seconds`, all
against one replica, then split between both, for `--rounds` interleaved
rounds. It prints pairs/s of each, the ratio (median over rounds), and the CPU
seconds each process used per 1,000 pairs, which say what bounds the ratio:
on 2 cores, two replicas, Redis and the load generator share them.
`--smoke`: 4 clients, half a second, one round.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from egress_proxies.kube import KubeClient
from egress_proxies.kube.resources import NAMESPACES
from harness.benchkit.cluster import add_cluster_arguments, create_namespace, dev_cluster
from harness.benchkit.lease_client import TOKEN, Client
from harness.cluster import wait_for
from harness.operator import proxy_path
from harness.redis import RedisServer
from harness.tier import DiscoveryProcess, external_proxy, report_healthy

FLEET = 40
SMOKE = {"clients": 4, "seconds": 0.5, "rounds": 1}

# The figures the report promises, each on a line of its own (tests/*/test_bench_smoke.py).
PAIRS = "lease+release pairs/s"
CPU = "CPU s per 1,000 pairs"
RATIO = "two replicas ÷ one"
FIGURES = (PAIRS, CPU, RATIO)
_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """User + system CPU of a process so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICKS


def own_cpu() -> float:
    """This process's CPU so far."""
    times = os.times()
    return times.user + times.system


@dataclass
class RoundResult:
    """One timed run: pairs per second and CPU seconds by process."""

    pairs_per_second: float
    cpu: dict[str, float]
    pairs: int


async def lease_release_loop(port: int, deadline: float) -> int:
    """Lease and release on one connection until the deadline; the number of pairs."""
    client = await Client.connect(port)
    body = json.dumps({"ttlSeconds": 60}).encode()
    pairs = 0
    try:
        while time.monotonic() < deadline:
            status, granted = await client.request("POST", "/v1/leases", body)
            if status != 201:
                raise RuntimeError(f"lease: {status} {granted[:200]!r}")
            lease_id = json.loads(granted)["leaseId"]
            status, _ = await client.request("DELETE", f"/v1/leases/{lease_id}")
            if status != 204:
                raise RuntimeError(f"release: {status}")
            pairs += 1
    finally:
        client.close()
    return pairs


async def timed_round(
    ports: list[int], clients: int, seconds: float, pids: dict[str, int]
) -> RoundResult:
    """`clients` connections spread over `ports` for `seconds`."""
    before = {name: cpu_seconds(pid) for name, pid in pids.items()}
    before["load generator"] = own_cpu()
    started = time.monotonic()
    deadline = started + seconds
    counts = await asyncio.gather(
        *(lease_release_loop(ports[i % len(ports)], deadline) for i in range(clients))
    )
    elapsed = time.monotonic() - started
    after = {name: cpu_seconds(pid) for name, pid in pids.items()}
    after["load generator"] = own_cpu()
    pairs = sum(counts)
    return RoundResult(pairs / elapsed, {k: after[k] - before[k] for k in before}, pairs)


async def fleet(kube: KubeClient) -> str:
    """A namespace with 40 healthy shared Proxies; its name."""
    namespace = await create_namespace(kube, "bench-tier")
    for i in range(FLEET):
        name = f"px-{i:02d}"
        await kube.create(proxy_path(namespace), external_proxy(name, 20000 + i, 1000))
        await report_healthy(kube, namespace, name, latency=10 + i)
    return namespace


def per_thousand(result: RoundResult) -> str:
    return ", ".join(
        f"{name} {1000 * seconds / max(result.pairs, 1):.2f}"
        for name, seconds in result.cpu.items()
    )


async def measure(args: argparse.Namespace, root: Path) -> None:
    tokens = root / "tokens"
    tokens.mkdir()
    (tokens / "bench").write_text(TOKEN)
    replicas: list[DiscoveryProcess] = []
    with dev_cluster(args, root / "cluster") as cluster:
        async with KubeClient(cluster.handle.credentials) as kube:
            namespace = await fleet(kube)
            try:
                with RedisServer() as redis:
                    replicas = [
                        DiscoveryProcess(
                            name=f"discovery-{letter}",
                            kubeconfig=cluster.handle.kubeconfig,
                            lease_store=redis.url,
                            token_dir=tokens,
                            log=root / f"discovery-{letter}.log",
                            pid_dir=root / "pids",
                        )
                        for letter in "ab"
                    ]
                    for replica in replicas:
                        replica.start()
                    for replica in replicas:
                        await replica.ready(timeout=60)
                    await wait_for(lambda: fleet_visible(replicas, namespace), timeout=60)
                    pids = {r.name: r.pid for r in replicas} | {"redis": redis.pid}
                    ports = [r.port for r in replicas]
                    await timed_round(ports, args.clients, 1.0, pids)  # warm-up
                    one, two = [], []
                    for _ in range(args.rounds):
                        one.append(await timed_round(ports[:1], args.clients, args.seconds, pids))
                        two.append(await timed_round(ports, args.clients, args.seconds, pids))
            finally:
                for replica in replicas:
                    replica.stop()
                await kube.delete(NAMESPACES.path(name=namespace))
    report(one, two, args)


async def fleet_visible(replicas: list[DiscoveryProcess], namespace: str) -> bool:
    """Whether every replica lists this run's whole fleet (a shared cluster may hold more)."""
    for replica in replicas:
        client = await Client.connect(replica.port)
        try:
            status, body = await client.request("GET", "/v1/proxies")
        finally:
            client.close()
        if status != 200:
            return False
        ours = [p for p in json.loads(body)["proxies"] if p["namespace"] == namespace]
        if len(ours) != FLEET:
            return False
    return True


def report(one: list[RoundResult], two: list[RoundResult], args: argparse.Namespace) -> None:
    ratios = [b.pairs_per_second / a.pairs_per_second for a, b in zip(one, two, strict=True)]
    print(f"{args.clients} clients, {args.seconds:g} s per run, {args.rounds} rounds, Redis store")
    for label, results in (("one replica ", one), ("two replicas", two)):
        rates = ", ".join(f"{r.pairs_per_second:.0f}" for r in results)
        print(f"  {label}: {PAIRS} {rates}")
        print(f"    {CPU} (median round): {per_thousand(median_round(results))}")
    print(
        f"{RATIO}: {statistics.median(ratios):.2f} (rounds: "
        + ", ".join(f"{r:.2f}" for r in ratios)
        + ")"
    )
    print(f"machine cores: {os.cpu_count()}")


def median_round(results: list[RoundResult]) -> RoundResult:
    return sorted(results, key=lambda r: r.pairs_per_second)[len(results) // 2]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", type=int, default=64)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--smoke", action="store_true", help=f"a quick run: {SMOKE}")
    add_cluster_arguments(parser)
    args = parser.parse_args()
    if args.smoke:
        vars(args).update(SMOKE)
    with tempfile.TemporaryDirectory(prefix="bench-tier-") as root:
        asyncio.run(measure(args, Path(root)))


if __name__ == "__main__":
    main()
