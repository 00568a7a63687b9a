"""Failover benchmark: deploy/ha's two operator pods, the active one crashed, a Proxy created then.

    .venv/bin/python -m bench.failover [--rounds 5] [--smoke] [--cluster STATE_DIR]

Starts a dev cluster (or uses the one `--cluster` names: it must hold no
other operator's Proxies, since deploy/ha watches every namespace), a
PostgreSQL on its host address for the stacks, and deploy/ha with the
locally built images. Each round crashes the replica at work, by deleting
its pod with grace 0 or by SIGKILLing the operator inside its container
(alternately), creates a Proxy at that moment and times it until the
standby has provisioned it (`Provisioned=True`); then waits for the pair
to be whole again (the replaced pod, or the restarted container, is the new
standby). Prints each crash's times, their median, and the median ÷ the
peering lifetime (the bound on noticing a crash; the rest is one `up`).
`--smoke`: one pod deletion.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from egress_proxies.kube import KubeClient
from egress_proxies.kube.resources import PODS
from harness.benchkit.cluster import add_cluster_arguments, create_namespace, dev_cluster
from harness.deploy import NAMESPACE
from harness.ha import (
    PEERING_LIFETIME,
    active_replica,
    deploy_ha,
    ha_backend,
    kill_operator_process,
    pair_whole,
)
from harness.operator import managed_proxy, proxy_path, wait_for_condition
from harness.origins import serve_origin

DELETED = "pod deleted (grace 0)"
KILLED = "operator SIGKILLed in its container"
# The figures the report promises, each on a line of its own (tests/*/test_bench_smoke.py).
MEDIAN = "create -> Provisioned by the standby, median"
RATIO = "median ÷ peering lifetime"
FIGURES = (MEDIAN, RATIO)

Crash = Callable[[KubeClient, dict[str, Any]], Awaitable[None]]


async def delete_pod(kube: KubeClient, pod: dict[str, Any]) -> None:
    """What a lost node or `kubectl delete --grace-period=0 --force` does to the active pod."""
    await kube.delete(PODS.path(NAMESPACE, pod["metadata"]["name"]), grace_seconds=0)


async def kill_operator(_: KubeClient, pod: dict[str, Any]) -> None:
    """The operator process dies; the kubelet restarts its container in the same pod."""
    kill_operator_process(pod)


# Each crash: what it is, and the name stem of the Proxies created at it.
CRASHES: dict[str, tuple[str, Crash]] = {
    DELETED: ("deleted", delete_pod),
    KILLED: ("killed", kill_operator),
}


async def one_round(
    kube: KubeClient, namespace: str, health: dict[str, Any], crash: Crash, name: str
) -> float:
    """Crash the active replica, create Proxy `name`; seconds until the standby provisioned it."""
    pods = {p["metadata"]["name"]: p for p in await pair_whole(kube)}
    active = await active_replica(kube)
    started = time.monotonic()
    await crash(kube, pods[active])
    await kube.create(proxy_path(namespace), managed_proxy(name, healthCheck=health))
    await wait_for_condition(kube, namespace, name, "Provisioned", "True", timeout=300)
    took = time.monotonic() - started
    if await active_replica(kube) == active:
        raise RuntimeError(f"{active} was crashed and is still the replica at work")
    return took


async def measure(args: argparse.Namespace, root: Path) -> dict[str, list[float]]:
    crashes = {DELETED: CRASHES[DELETED]} if args.smoke else CRASHES
    times: dict[str, list[float]] = {how: [] for how in crashes}
    with dev_cluster(args, root / "cluster") as cluster, ha_backend(cluster.handle) as postgres:
        handle = cluster.handle
        deploy_ha(handle, root / "overlay", postgres)
        async with (
            KubeClient(handle.credentials) as kube,
            serve_origin(host=handle.host_address) as origin,
        ):
            namespace = await create_namespace(kube, "failover")
            health = {
                "url": origin.url,
                "expectedStatus": 200,
                "intervalSeconds": 2,
                "timeoutSeconds": 1,
            }
            # The first `up` warms the plugin cache; it is not a failover.
            await kube.create(proxy_path(namespace), managed_proxy("warm", healthCheck=health))
            await wait_for_condition(kube, namespace, "warm", "Provisioned", "True", timeout=300)
            for index in range(args.rounds):
                for how, (stem, crash) in crashes.items():
                    took = await one_round(kube, namespace, health, crash, f"{stem}-{index}")
                    times[how].append(took)
                    print(f"round {index + 1}, {how}: {took:.1f} s", flush=True)
    return times


def report(times: dict[str, list[float]]) -> None:
    print(f"\npeering lifetime {PEERING_LIFETIME} s (the bound on noticing a crash)")
    for how, seconds in times.items():
        median = statistics.median(seconds)
        print(f"{how}: {', '.join(f'{s:.1f}' for s in seconds)} s")
        print(f"  {MEDIAN}: {median:.1f} s over {len(seconds)}")
        print(f"  {RATIO}: {median / PEERING_LIFETIME:.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5, help="crashes of each kind")
    parser.add_argument("--smoke", action="store_true", help="one pod deletion")
    add_cluster_arguments(parser)
    args = parser.parse_args()
    if args.smoke:
        args.rounds = 1
    with tempfile.TemporaryDirectory(prefix="bench-failover-") as root:
        times = asyncio.run(measure(args, Path(root)))
    report(times)


if __name__ == "__main__":
    main()
