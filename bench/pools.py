"""Pool benchmark: a ProxyPool scaled 0 → N against N single Proxies' worth of work.

    .venv/bin/python -m bench.pools [--replicas 20] [--repeat 2]

Starts a dev cluster (the loopback kubelet runs each Squid pod as a real
squid), an origin the health probes fetch through the proxies, and the real
operator (`egress-proxies run`, concurrency 4). In one run:

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

CPU seconds (the operator with its pulumi processes, and the whole machine)
are printed beside the times. Everything started here is stopped at the end.
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

from bench.reconcile import (
    CONCURRENCY,
    OPERATOR_ENV,
    Descendants,
    Progress,
    Share,
    apply_many,
    cpu_seconds,
    create_namespace,
    dev_cluster,
    operator_pid,
    operator_run,
    running,
    wait_operator_up,
)
from egress_proxies.devcluster import KubeClient
from egress_proxies.kube.resources import PROXY_POOLS
from harness.operator import new_operator, proxy_path, wait_gone
from harness.origins import serve_origin

POLL_SECONDS = 0.5
TIMEOUT_SECONDS = 900.0


async def scale_pool(
    kube: KubeClient, namespace: str, replicas: int, spec: dict[str, Any], progress: Progress
) -> float:
    """Create a pool at 0, scale it to `replicas`; the seconds until all are Ready."""
    template = {"spec": {"provider": "kubernetes", "kubernetes": {}, **spec}}
    await kube.create(
        PROXY_POOLS.path(namespace),
        {
            "apiVersion": PROXY_POOLS.api_version,
            "kind": "ProxyPool",
            "metadata": {"name": "bench"},
            "spec": {"replicas": 0, "template": template},
        },
    )
    started = time.perf_counter()
    await kube.patch(
        PROXY_POOLS.path(namespace, "bench", "scale"), {"spec": {"replicas": replicas}}
    )
    last_report = started
    while True:
        status = (await kube.get(PROXY_POOLS.path(namespace, "bench"))).get("status") or {}
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
    progress("starting the dev cluster")
    with dev_cluster(root / "cluster") as handle:
        async with KubeClient(handle.credentials) as kube, serve_origin() as origin:
            spec = {"healthCheck": {"url": origin.url, "expectedStatus": 200}}
            namespace = await create_namespace(kube, "bench-pools")
            work = root / "operator"
            work.mkdir()
            with running(
                new_operator(handle.kubeconfig, namespace, work, OPERATOR_ENV), processes
            ) as op:
                await wait_operator_up(op)
                progress("1. one Proxy: warm-up (untimed)")
                await operator_run(kube, op, "warm", spec)
                singles = []
                for index in range(args.repeat):
                    run = await operator_run(kube, op, f"one{index}", spec)
                    singles.append(run)
                    progress(f"  one Proxy run {index + 1}: {run.seconds:.2f} s")
                one = statistics.median(run.seconds for run in singles)
                progress(f"3. {args.replicas} plain Proxies applied at once")
                names = [f"plain{index}" for index in range(args.replicas)]
                plain_cpu_before, plain_machine_before = (
                    cpu_seconds(operator_pid(op)),
                    Share.now(),
                )
                plain = await apply_many(kube, op, names, spec, progress)
                plain_cpu = cpu_seconds(operator_pid(op)) - plain_cpu_before
                plain_machine = Share.now().since(plain_machine_before)
                await asyncio.gather(*(kube.delete(proxy_path(namespace, n)) for n in names))
                for name in names:
                    await wait_gone(kube, proxy_path(namespace, name), timeout=300)
                progress(f"2. a pool scaled 0 -> {args.replicas}")
                cpu_before, machine_before = cpu_seconds(operator_pid(op)), Share.now()
                seconds = await scale_pool(kube, namespace, args.replicas, spec, progress)
                cpu = cpu_seconds(operator_pid(op)) - cpu_before
                machine = Share.now().since(machine_before)
                processes.note()
        progress("stopping the dev cluster")
    expected = args.replicas * one / CONCURRENCY
    print("1. one Proxy, create call to phase Ready")
    print(
        f"   {one:6.2f} s  median of {len(singles)} "
        f"[{', '.join(f'{run.seconds:.2f}' for run in singles)}]; "
        f"operator CPU {statistics.median(run.cpu_seconds for run in singles):.2f} s"
    )
    print(f"2. ProxyPool scaled 0 -> {args.replicas}, until status.readyReplicas = {args.replicas}")
    print(
        f"   {seconds:6.2f} s  vs {args.replicas} x {one:.2f} s / concurrency {CONCURRENCY} "
        f"= {expected:.2f} s"
    )
    print(f"   ratio {seconds / expected:.2f}  (target <= 1.3)")
    print(
        f"   CPU: operator + pulumi {cpu:.1f} s ({cpu / args.replicas:.2f} s per Proxy); "
        f"machine {machine.busy:.1f} s busy of {machine.total:.1f} s ({machine.fraction:.0%})"
    )
    print(f"3. {args.replicas} plain Proxies applied at once, until all Ready")
    print(f"   {plain:6.2f} s; pool ÷ plain: {seconds / plain:.2f}")
    print(
        f"   CPU: operator + pulumi {plain_cpu:.1f} s; machine {plain_machine.busy:.1f} s "
        f"busy of {plain_machine.total:.1f} s ({plain_machine.fraction:.0%})"
    )


def main() -> None:
    """Parse the sizes, run, clean up, print."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--replicas", type=int, default=20, help="the pool's size after scaling")
    parser.add_argument("--repeat", type=int, default=2, help="timed single-Proxy runs")
    args = parser.parse_args()
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
