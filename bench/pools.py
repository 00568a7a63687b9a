"""Pool benchmark: a ProxyPool scaled 0 → N against N single Proxies' worth of work.

    .venv/bin/python -m bench.pools [--replicas 20] [--repeat 2] [--smoke]
        [--cluster STATE_DIR]

Starts a dev cluster (or uses the running one `--cluster` names), an origin
the health probes fetch through the proxies, and the real operator
(`egress-proxies run`, concurrency 4). In one run:

1. One Proxy, applied alone, from the create call to phase Ready (a warm-up
   first, untimed; then the median of `--repeat`).
2. A ProxyPool of the same template at `replicas: 0`, then scaled to
   `--replicas` through the scale subresource: the time until
   `status.readyReplicas` reaches it ÷ (replicas x one Proxy ÷ concurrency)
   (target ≤ 1.3).
3. Beside it, the same number of plain Proxies applied at once to the same
   operator (deleted again before the pool starts): pool ÷ plain shows what
   the pool controller adds over the reconciler's own throughput on this
   machine, whatever its load.

CPU seconds per Proxy are printed beside the times, split by process
(harness/benchkit/cpu.py: the operator, its stack worker, the pulumi CLI, the
kubernetes plugin; the dev cluster, this process and every other process
apart), with their sum beside the machine's busy CPU (/proc/stat) in the
same window. `--smoke`: one timed Proxy and a pool of 2, in a minute or so.
Everything started here is stopped at the end, its namespace deleted.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from egress_proxies.devcluster import KubeClient
from egress_proxies.kube.resources import PROXY_POOLS
from egress_proxies.model import GROUP, VERSION
from harness.benchkit.cluster import (
    add_cluster_arguments,
    create_namespace,
    delete_namespace,
    dev_cluster,
)
from harness.benchkit.cpu import Window
from harness.benchkit.operators import (
    CONCURRENCY,
    CPU_BY_PROCESS,
    CPU_SUM,
    Descendants,
    Progress,
    SingleRun,
    apply_many,
    operator_run,
    running,
    summed,
    wait_operator_up,
)
from harness.operator import proxy_path, wait_gone
from harness.origins import serve_origin

POLL_SECONDS = 0.5
TIMEOUT_SECONDS = 900.0
SMOKE = {"replicas": 2, "repeat": 1}

# The figures the report promises, each on a line of its own (tests/*/test_bench_smoke.py).
ONE_PROXY = "one Proxy, create to Ready"
POOL_RATIO = "ratio pool / ideal"
POOL_PLAIN = "pool / plain"
FIGURES = (ONE_PROXY, POOL_RATIO, POOL_PLAIN, CPU_BY_PROCESS, CPU_SUM)


async def scale_pool(
    kube: KubeClient, namespace: str, replicas: int, spec: dict[str, Any], progress: Progress
) -> float:
    """Create a pool at 0, scale it to `replicas`; the seconds until all are Ready."""
    pools = PROXY_POOLS.path(namespace)
    template = {"spec": {"provider": "kubernetes", "kubernetes": {}, **spec}}
    await kube.create(
        pools,
        {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "ProxyPool",
            "metadata": {"name": "bench"},
            "spec": {"replicas": 0, "template": template},
        },
    )
    started = time.perf_counter()
    await kube.patch(f"{pools}/bench/scale", {"spec": {"replicas": replicas}})
    last_report = started
    while True:
        status = (await kube.get(f"{pools}/bench")).get("status") or {}
        now = time.perf_counter()
        if status.get("readyReplicas") == replicas:
            return now - started
        if now - started > TIMEOUT_SECONDS:
            raise RuntimeError(f"pool not Ready after {TIMEOUT_SECONDS:.0f} s: {status}")
        if now - last_report > 15:
            progress(f"  {status.get('readyReplicas', 0)}/{replicas} Ready")
            last_report = now
        await asyncio.sleep(POLL_SECONDS)


async def measure(
    args: argparse.Namespace, root: Path, progress: Progress, processes: Descendants
) -> None:
    """Both phases on one dev cluster and one operator; prints the report."""
    progress("starting the dev cluster" if args.cluster is None else "using the dev cluster")
    with dev_cluster(args, root / "cluster") as cluster:
        async with KubeClient(cluster.handle.credentials) as kube, serve_origin() as origin:
            spec = {"healthCheck": {"url": origin.url, "expectedStatus": 200}}
            namespace = await create_namespace(kube, "bench-pools")
            work = root / "operator"
            work.mkdir()
            with running(cluster, namespace, work, processes) as op:
                await wait_operator_up(op.process)
                progress("1. one Proxy: warm-up (untimed)")
                await operator_run(kube, op, "warm", spec)
                singles = []
                for index in range(args.repeat):
                    run = await operator_run(kube, op, f"one{index}", spec)
                    singles.append(run)
                    progress(f"  one Proxy run {index + 1}: {run.seconds:.2f} s")
                progress(f"3. {args.replicas} plain Proxies applied at once")
                names = [f"plain{index}" for index in range(args.replicas)]
                before = op.meter.read()
                plain = await apply_many(kube, op.process, names, spec, progress)
                plain_cpu = op.meter.read().since(before)
                await asyncio.gather(*(kube.delete(proxy_path(namespace, n)) for n in names))
                for name in names:
                    await wait_gone(kube, proxy_path(namespace, name), timeout=300)
                progress(f"2. a pool scaled 0 -> {args.replicas}")
                before = op.meter.read()
                seconds = await scale_pool(kube, namespace, args.replicas, spec, progress)
                cpu = op.meter.read().since(before)
                processes.note()
            await delete_namespace(kube, namespace)
        progress("done with the dev cluster")
    report(args, singles, seconds, cpu, plain, plain_cpu)


def report(
    args: argparse.Namespace,
    singles: list[SingleRun],
    seconds: float,
    cpu: Window,
    plain: float,
    plain_cpu: Window,
) -> None:
    """The times, ratios and CPU split."""
    one = statistics.median(run.seconds for run in singles)
    expected = args.replicas * one / CONCURRENCY
    print(f"1. {ONE_PROXY}: {one:6.2f} s  median of {len(singles)} ", end="")
    print(f"[{', '.join(f'{run.seconds:.2f}' for run in singles)}]")
    for line in summed(singles).lines(len(singles)):
        print(f"   {line}")
    print(f"2. ProxyPool scaled 0 -> {args.replicas}, until status.readyReplicas = {args.replicas}")
    print(
        f"   {seconds:6.2f} s  vs {args.replicas} x {one:.2f} s / concurrency {CONCURRENCY} "
        f"= {expected:.2f} s"
    )
    print(f"   {POOL_RATIO}: {seconds / expected:.2f}  (target <= 1.3)")
    print(f"   the machine was {cpu.fraction:.0%} busy meanwhile")
    for line in cpu.lines(args.replicas):
        print(f"   {line}")
    print(f"3. {args.replicas} plain Proxies applied at once, until all Ready")
    print(f"   {plain:6.2f} s; {POOL_PLAIN}: {seconds / plain:.2f}")
    for line in plain_cpu.lines(args.replicas):
        print(f"   {line}")


def main() -> None:
    """Parse the sizes, run, clean up, print."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--replicas", type=int, default=20, help="the pool's size after scaling")
    parser.add_argument("--repeat", type=int, default=2, help="timed single-Proxy runs")
    parser.add_argument("--smoke", action="store_true", help=f"a quick run: {SMOKE}")
    add_cluster_arguments(parser)
    args = parser.parse_args()
    if args.smoke:
        vars(args).update(SMOKE)
    if args.replicas < 1 or args.repeat < 1:
        parser.error("need --replicas >= 1 and --repeat >= 1")
    progress, processes = Progress(), Descendants()
    root = Path(tempfile.mkdtemp(prefix="bench-pools-"))
    try:
        asyncio.run(measure(args, root, progress, processes))
    finally:
        processes.note()
        killed = processes.kill_survivors()
        shutil.rmtree(root, ignore_errors=True)
        progress(f"cleaned up; processes left running and killed now: {killed or 'none'}")


if __name__ == "__main__":
    main()
