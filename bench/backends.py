"""Provisioning on a shared state backend: N Proxies at once on postgres:// and on s3://,
each ÷ the same on file:// in the same run (target: file's time ÷ the backend's ≥ 0.8).

Run: `.venv/bin/python -m bench.backends [--many 20] [--smoke] [--cluster STATE_DIR]`
(`--smoke`: 2 Proxies per backend). One dev
cluster; for each backend a new operator (concurrency 4) on a namespace of its own, a
warm-up Proxy (untimed), then `--many` Proxies created at once, timed until all are Ready.
PostgreSQL and versitygw run on loopback as the tests start them.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from egress_proxies.devcluster import KubeClient
from harness.benchkit.cluster import (
    BenchCluster,
    add_cluster_arguments,
    create_namespace,
    delete_namespace,
    dev_cluster,
)
from harness.benchkit.operators import (
    OPERATOR_ENV,
    Descendants,
    Progress,
    apply_many,
    operator_run,
    running,
    wait_operator_up,
)
from harness.origins import serve_origin
from harness.postgres import PostgresServer
from harness.s3 import S3Server

BACKENDS = ("file", "postgres", "s3")
TARGET = 0.8

# The figures the report promises, each on a line of its own.
AT_ONCE = "at once on"
RATIO = "ratio file / "
FIGURES = (AT_ONCE, RATIO)
SMOKE_MANY = 2


@contextlib.contextmanager
def backend_env(kind: str) -> Iterator[dict[str, str]]:
    """The operator's variables for a fresh backend of `kind` (none for file://)."""
    if kind == "file":
        yield {}
    elif kind == "postgres":
        with PostgresServer() as server:
            yield {"EGRESS_PROXIES_STATE_BACKEND": server.url, **server.env}
    else:
        with S3Server() as s3:
            s3.create_bucket("bench")
            yield {"EGRESS_PROXIES_STATE_BACKEND": s3.url("bench", "operator"), **s3.env}


async def provision(
    kube: KubeClient,
    cluster: BenchCluster,
    spec: dict[str, Any],
    kind: str,
    many: int,
    root: Path,
    progress: Progress,
    processes: Descendants,
) -> float:
    """Seconds until `many` Proxies created at once are Ready on a backend of `kind`."""
    namespace = await create_namespace(kube, f"bench-{kind}")
    work = root / f"operator-{kind}"
    work.mkdir()
    with (
        backend_env(kind) as extra,
        running(
            cluster,
            namespace,
            work,
            processes,
            {**OPERATOR_ENV, **extra},
        ) as metered,
    ):
        await wait_operator_up(metered.process)
        progress(f"{kind}: warming up with one Proxy (untimed)")
        await operator_run(kube, metered, "warm", spec)
        progress(f"{kind}: {many} Proxies at once")
        names = [f"m{index:03d}" for index in range(many)]
        seconds = await apply_many(kube, metered.process, names, spec, progress)
        progress(f"{kind}: all Ready after {seconds:.1f} s")
    await delete_namespace(kube, namespace)
    return seconds


async def measure(
    args: argparse.Namespace, root: Path, progress: Progress, processes: Descendants
) -> dict[str, float]:
    """Each backend on one dev cluster."""
    results: dict[str, float] = {}
    with dev_cluster(args, root / "cluster") as bench_cluster:
        async with KubeClient(bench_cluster.handle.credentials) as kube, serve_origin() as origin:
            spec: dict[str, Any] = {"healthCheck": {"url": origin.url, "expectedStatus": 200}}
            for kind in BACKENDS:
                results[kind] = await provision(
                    kube, bench_cluster, spec, kind, args.many, root, progress, processes
                )
    return results


def main() -> None:
    """Parse, run, print the times and the ratios."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--many", type=int, default=20, help="Proxies created at once")
    parser.add_argument("--smoke", action="store_true", help=f"{SMOKE_MANY} Proxies per backend")
    add_cluster_arguments(parser)
    args = parser.parse_args()
    if args.smoke:
        args.many = SMOKE_MANY
    progress, processes = Progress(), Descendants()
    root = Path(tempfile.mkdtemp(prefix="bench-backends-"))
    try:
        results = asyncio.run(measure(args, root, progress, processes))
    finally:
        processes.note()
        processes.kill_survivors()
        shutil.rmtree(root, ignore_errors=True)
    for kind, seconds in results.items():
        print(f"{args.many} Proxies {AT_ONCE} {kind}: {seconds:7.1f} s until all Ready")
    for kind in BACKENDS[1:]:
        ratio = results["file"] / results[kind]
        print(f"{RATIO}{kind}: {ratio:.2f}  (target >= {TARGET}; 1 is as fast as file://)")


if __name__ == "__main__":
    main()
