"""Operator memory per Proxy: RSS at 0, 100 and 300 Ready Proxies, External and managed.

Runs the real operator (`egress-proxies run`) on a dev cluster, once per
kind of Proxy, and reads the resident memory of the operator process plus
its stack worker processes (what the pod holds between operations; pulumi
and its plugins, which run only during an operation, are not counted) with
no Proxy and after each count has become Ready. Before each reading it
waits (up to WORKER_WAIT_SECONDS) for an idle stack worker to exit, as it
does `--stack-worker-idle` seconds after the last operation, and says how
long it waited; "peak" is the largest operator + worker total sampled while
the Proxies were being created. External Proxies (all pointing at one
open Squid pod) measure what a Proxy costs without a stack: the watch
caches, the fleet, the health engine, the status writer. Managed ones add
the stack and the pod watch. `--tracemalloc` also diffs allocation
snapshots of the operator (0 vs the largest count) by allocation site;
tracemalloc's own overhead inflates RSS then, so its RSS numbers are not
comparable to a run without it.

`--baseline-env NAME=VALUE` (repeatable) measures a second operator per
kind first, with those variables, and prints each reading of this one ÷
the baseline's, both measured in this run. For the code before a change:
`--baseline-env PYTHONPATH=/path/to/old/checkout --baseline-env
PYTHONSAFEPATH=1` (the operator runs as `python -m` from this directory,
which would otherwise come first on its path). Each
operator's namespace is deleted when it is done (finalizers stripped), so
the next one starts beside no leftover pods.

    .venv/bin/python -m bench.memory [--counts 100,300] [--kinds external,managed]
        [--baseline-env NAME=VALUE] [--smoke] [--cluster STATE_DIR]

`--smoke`: 2 Proxies of each kind, in a minute or two.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import signal
import statistics
import tempfile
import time
import tracemalloc
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from egress_proxies.devcluster import KubeClient
from egress_proxies.devcluster.node import image_ref
from egress_proxies.kube.resources import CONFIG_MAPS, PODS, SECRETS
from egress_proxies.model import GROUP, VERSION, ProxySpec
from egress_proxies.stacks.inputs import ProgramInputs, ProxyCredentials
from egress_proxies.stacks.programs.squid_config import HELPER_FILE
from egress_proxies.stacks.programs.squid_pod import CONTAINER_DIRECTIVES, pod_spec
from egress_proxies.telemetry.memory import ENV as TRACEMALLOC_ENV
from egress_proxies.telemetry.memory import FRAMES_ENV
from harness.benchkit.cluster import (
    BenchCluster,
    add_cluster_arguments,
    create_namespace,
    delete_namespace,
    dev_cluster,
)
from harness.benchkit.operators import (
    OPERATOR_ENV,
    POLL_MANY,
    PROGRESS_EVERY,
    RSS_SAMPLES,
    SETTLE_SECONDS,
    STALL_SECONDS,
    Descendants,
    Progress,
    Rss,
    operator_pid,
    phase,
    rss_kib,
    running,
    wait_operator_up,
)
from harness.cluster import wait_for
from harness.operator import OperatorProcess, proxy_path
from harness.origins import serve_origin

OPEN_SQUID = "http_port 3128\nhttp_access allow all\n"
TOP_SITES = 15
WORKER_WAIT_SECONDS = 120.0
PEAK_INTERVAL = 0.5
# Two of each kind; the idle stack worker exits after 2 s instead of 30 before a reading.
SMOKE = {
    "counts": "2",
    "kinds": "external,managed",
    "operator_env": "EGRESS_PROXIES_STACK_WORKER_IDLE=2",
}

# The figures the report promises, each on a line of its own (tests/*/test_bench_smoke.py).
EMPTY_RSS = "operator RSS"
PER_PROXY = "KiB per Proxy"
FIGURES = (EMPTY_RSS, PER_PROXY)


def workers(pid: int) -> list[int]:
    """The operator's Python children: its stack worker (pulumi's processes are not Python)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            status = (entry / "status").read_text()
        except OSError:
            continue
        fields = dict(line.split(":\t", 1) for line in status.splitlines() if ":\t" in line)
        if fields.get("PPid") == str(pid) and fields.get("Name", "").startswith("python"):
            found.append(int(entry.name))
    return found


def pod_kib(pid: int) -> tuple[int, int]:
    """VmRSS and RssAnon of the operator plus its stack workers."""
    rss, _, anonymous = rss_kib(pid)
    for worker in workers(pid):
        try:
            worker_rss, _, worker_anonymous = rss_kib(worker)
        except (OSError, KeyError):
            continue  # it exited just now
        rss += worker_rss
        anonymous += worker_anonymous
    return rss, anonymous


async def sample_pod(pid: int, peak: int) -> Rss:
    """The median of a few operator + worker samples a second apart; `peak` as given."""
    samples, anonymous = [], []
    for _ in range(RSS_SAMPLES):
        current, anon = pod_kib(pid)
        samples.append(current)
        anonymous.append(anon)
        await asyncio.sleep(1.0)
    return Rss(int(statistics.median(samples)), peak, int(statistics.median(anonymous)))


async def wait_workers_gone(pid: int) -> float:
    """Seconds until the operator has no stack worker (at most WORKER_WAIT_SECONDS)."""
    start = time.monotonic()
    for _ in range(int(WORKER_WAIT_SECONDS)):
        if not workers(pid):
            break
        await asyncio.sleep(1.0)
    return time.monotonic() - start


class PeakSampler:
    """The largest operator + worker RSS seen while it runs."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.peak = 0

    async def run(self) -> None:
        """Sample until cancelled."""
        while True:
            self.peak = max(self.peak, pod_kib(self.pid)[0])
            await asyncio.sleep(PEAK_INTERVAL)


def proxy_body(name: str, kind: str, endpoint: str, health_url: str) -> dict[str, Any]:
    """One Proxy of a kind: External (at `endpoint`) or a managed Squid pod."""
    spec: dict[str, Any] = {"healthCheck": {"url": health_url, "expectedStatus": 200}}
    if kind == "external":
        spec |= {"mode": "External", "endpoint": {"host": endpoint, "port": 3128}}
    else:
        spec |= {"provider": "kubernetes", "kubernetes": {}}
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "Proxy",
        "metadata": {"name": name, "labels": {"bench": kind}},
        "spec": spec,
    }


async def open_squid(kube: KubeClient, namespace: str) -> str:
    """An open Squid pod for the External Proxies to point at; its pod IP.

    The product's pod spec on the operators' squid image, with a squid.conf that
    lets everyone through (an External Proxy here has no credentials).
    """
    await kube.create(
        CONFIG_MAPS.path(namespace),
        {
            "metadata": {"name": "open"},
            "data": {"squid.conf": OPEN_SQUID + CONTAINER_DIRECTIVES, HELPER_FILE: ""},
        },
    )
    # The files the pod spec mounts; an open squid reads none of them.
    unused = dict.fromkeys(("username", "password", "signingKey"), "unused")
    await kube.create(
        SECRETS.path(namespace), {"metadata": {"name": "open-auth"}, "stringData": unused}
    )
    spec = ProxySpec.model_validate(
        {"provider": "kubernetes", "kubernetes": {"image": image_ref("squid")}}
    )
    inputs = ProgramInputs(
        namespace=namespace,
        name="open-squid",
        uid="open-squid",
        instance_name="open-squid",
        spec=spec,
        credentials=ProxyCredentials("unused", "unused"),
    )
    pod = {"metadata": {"name": "open-squid"}, "spec": pod_spec(inputs, "open-auth", "open")}
    await kube.create(PODS.path(namespace), pod)

    async def ip() -> str | None:
        status = (await kube.get(PODS.path(namespace, "open-squid"))).get("status") or {}
        return status.get("podIP") if status.get("phase") == "Running" else None

    return await wait_for(ip, timeout=120)


async def apply_until_ready(
    kube: KubeClient, namespace: str, bodies: list[dict[str, Any]], progress: Progress
) -> float:
    """Create the Proxies; the seconds until every Proxy in the namespace is Ready."""
    started = time.perf_counter()
    for chunk in range(0, len(bodies), 50):
        await asyncio.gather(
            *(kube.create(proxy_path(namespace), body) for body in bodies[chunk : chunk + 50])
        )
    reported = last_change = started
    ready = 0
    while True:
        items = (await kube.get(proxy_path(namespace)))["items"]
        phases = Counter(phase(item) for item in items)
        now = time.perf_counter()
        if phases["Ready"] == len(items):
            return now - started
        if phases["Ready"] != ready:
            ready, last_change = phases["Ready"], now
        elif now - last_change > STALL_SECONDS:
            raise RuntimeError(f"no Proxy became Ready for {STALL_SECONDS:.0f} s: {phases}")
        if now - reported >= PROGRESS_EVERY:
            reported = now
            progress(f"  {now - started:5.0f} s: {dict(phases)}")
        await asyncio.sleep(POLL_MANY)


def snapshot(operator: OperatorProcess, directory: Path, count: int) -> Path:
    """Ask the operator for a tracemalloc snapshot; wait until it is written."""
    path = directory / f"snapshot-{count}.pickle"
    os.kill(operator_pid(operator), signal.SIGUSR2)
    deadline = time.monotonic() + 120
    while not path.exists() and time.monotonic() < deadline:
        time.sleep(0.5)
    time.sleep(2)  # the dump is written in one go; give it time to finish
    return path


def rss_by_mapping(pid: int) -> Counter[str]:
    """The operator's resident KiB by kind of mapping: the brk heap, other anonymous, files.

    glibc's main arena grows the brk heap; pymalloc's arenas, glibc's other arena
    and blocks above the mmap threshold are the other anonymous mappings (the
    kernel merges adjacent ones, so they are not told apart further).
    """
    kinds: Counter[str] = Counter()
    kind = "file"
    for line in Path(f"/proc/{pid}/smaps").read_text().splitlines():
        head = line.split(maxsplit=5)
        if "-" in head[0] and len(head) >= 5 and not head[0].endswith(":"):
            name = head[5].strip() if len(head) > 5 else ""
            kind = "heap" if name == "[heap]" else "anonymous" if not name else "file"
        elif head[0] == "Rss:":
            kinds[kind] += int(head[1])
    return kinds


def split_growth(before: Counter[str], after: Counter[str], count: int) -> str:
    """Per-Proxy growth of each kind of mapping."""
    return ", ".join(
        f"{kind} {(after[kind] - before[kind]) / count:.0f}"
        for kind in ("heap", "anonymous", "file")
    )


def top_sites(first: Path, last: Path, proxies: int) -> list[str]:
    """The allocation sites that grew most, per Proxy."""
    before = tracemalloc.Snapshot.load(str(first))
    after = tracemalloc.Snapshot.load(str(last))
    lines = []
    for stat in after.compare_to(before, "lineno")[:TOP_SITES]:
        frame = stat.traceback[0]
        where = f"{frame.filename.split('site-packages/')[-1]}:{frame.lineno}"
        lines.append(f"     {stat.size_diff / 1024 / proxies:7.1f} KiB/Proxy  {where}")
    lines.append("   the four largest, by the frames that allocated them:")
    for stat in after.compare_to(before, "traceback")[:4]:
        lines.append(f"     {stat.size_diff / 1024 / proxies:7.1f} KiB/Proxy")
        for frame in list(stat.traceback)[-6:]:
            lines.append(f"         {frame.filename.split('site-packages/')[-1]}:{frame.lineno}")
    return lines


@dataclass
class Readings:
    """One operator's RSS, in KiB: with no Proxy, and at each count of Ready ones."""

    label: str
    empty: int = 0
    at: dict[int, int] = field(default_factory=dict)

    def growth(self, count: int) -> float:
        """KiB of RSS per Ready Proxy at `count`, over the empty operator."""
        return (self.at[count] - self.empty) / count

    def marginal(self, count: int) -> str:
        """KiB per Proxy added since the previous count (what one more Proxy costs)."""
        earlier = [n for n in self.at if n < count]
        if not earlier:
            return ""
        since = max(earlier)
        per_proxy = (self.at[count] - self.at[since]) / (count - since)
        return f" ({per_proxy:.0f} KiB per Proxy since {since})"


async def measure_kind(
    cluster: BenchCluster,
    kube: KubeClient,
    kind: str,
    counts: list[int],
    endpoint: str,
    health_url: str,
    work: Path,
    env: dict[str, str],
    args: argparse.Namespace,
    progress: Progress,
    processes: Descendants,
    label: str,
) -> Readings:
    """One operator, one kind of Proxy: RSS at 0 and at each count."""
    namespace = await create_namespace(kube, f"bench-mem-{kind}")
    work.mkdir()
    snapshots = work / "snapshots"
    if args.tracemalloc:
        env = env | {TRACEMALLOC_ENV: str(snapshots), FRAMES_ENV: str(args.tracemalloc_frames)}
    readings = Readings(label)
    name = f"{kind} ({label})"
    with running(cluster, namespace, work, processes, env) as metered:
        op = metered.process
        await wait_operator_up(op)
        await asyncio.sleep(SETTLE_SECONDS)
        pid = operator_pid(op)
        zero = await sample_pod(pid, rss_kib(pid)[1])
        readings.empty = zero.current
        mappings = rss_by_mapping(pid)
        first = snapshot(op, snapshots, 0) if args.tracemalloc else None
        print(
            f"{name}: operator RSS {zero.current / 1024:.1f} MiB with 0 Proxies "
            f"(anonymous {zero.anonymous / 1024:.1f})",
            flush=True,
        )
        made = 0
        for count in counts:
            bodies = [
                proxy_body(f"{kind[0]}{index:04d}", kind, endpoint, health_url)
                for index in range(made, count)
            ]
            progress(f"{name}: {len(bodies)} more Proxies, for {count}")
            sampler = PeakSampler(pid)
            sampling = asyncio.create_task(sampler.run())
            try:
                seconds = await apply_until_ready(kube, namespace, bodies, progress)
                made = count
                await asyncio.sleep(SETTLE_SECONDS)
                waited = await wait_workers_gone(pid)
            finally:
                sampling.cancel()
            rss = await sample_pod(pid, sampler.peak)
            readings.at[count] = rss.current
            left = len(workers(pid))
            print(
                f"{name}: {count} Ready in {seconds:.0f} s; waited {waited:.0f} s more for the "
                f"stack worker to exit ({left} still running); RSS {rss.current / 1024:.1f} MiB "
                f"(peak {rss.peak / 1024:.1f}, anonymous {rss.anonymous / 1024:.1f}): "
                f"{readings.growth(count):.0f} KiB per Proxy{readings.marginal(count)}, anonymous "
                f"{(rss.anonymous - zero.anonymous) / count:.0f} (the operator's own by "
                f"mapping, KiB per Proxy: {split_growth(mappings, rss_by_mapping(pid), count)})",
                flush=True,
            )
        if first is not None:
            last = snapshot(op, snapshots, 1)
            print(f"{name}: allocation sites that grew most (0 -> {made} Proxies):")
            print("\n".join(top_sites(first, last, made)), flush=True)
    await delete_namespace(kube, namespace)
    return readings


def compare(kind: str, ours: Readings, baseline: Readings) -> None:
    """Print this operator's readings ÷ the baseline's."""
    parts = [f"empty {ours.empty / baseline.empty:.2f}"]
    for count in ours.at:
        parts.append(
            f"per Proxy at {count} {ours.growth(count):.0f} / {baseline.growth(count):.0f} KiB"
            f" = {ours.growth(count) / baseline.growth(count):.2f}"
        )
    print(f"{kind}: this ÷ baseline: " + "; ".join(parts), flush=True)


async def measure(
    args: argparse.Namespace, root: Path, progress: Progress, processes: Descendants
) -> None:
    """Every kind on one dev cluster under `root`."""
    progress("starting the dev cluster" if args.cluster is None else "using the dev cluster")
    with dev_cluster(args, root / "cluster") as cluster:
        async with KubeClient(cluster.handle.credentials) as kube, serve_origin() as origin:
            squid_namespace = await create_namespace(kube, "bench-mem-squid")
            endpoint = await open_squid(kube, squid_namespace)
            env = dict(OPERATOR_ENV) | dict(item.split("=", 1) for item in args.operator_env)
            for kind in args.kinds:
                variants = [("this", env)]
                if args.baseline_env:
                    baseline = env | dict(item.split("=", 1) for item in args.baseline_env)
                    variants.insert(0, ("baseline", baseline))
                readings = [
                    await measure_kind(
                        cluster,
                        kube,
                        kind,
                        args.counts,
                        endpoint,
                        origin.url,
                        root / f"operator-{kind}-{label}",
                        variant_env,
                        args,
                        progress,
                        processes,
                        label,
                    )
                    for label, variant_env in variants
                ]
                if len(readings) == 2:
                    compare(kind, readings[1], readings[0])
            await delete_namespace(kube, squid_namespace)
        progress("done with the dev cluster")


def main() -> None:
    """Parse the sizes, run, clean up."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--counts", default="100,300", help="Ready Proxies at each reading")
    parser.add_argument("--kinds", default="external,managed", help="external and/or managed")
    parser.add_argument("--tracemalloc", action="store_true", help="diff allocation sites")
    parser.add_argument(
        "--tracemalloc-frames",
        type=int,
        default=25,
        help="frames per allocation (fewer slow the operator less under a burst)",
    )
    parser.add_argument(
        "--operator-env", action="append", default=[], help="NAME=VALUE for the operator"
    )
    parser.add_argument(
        "--baseline-env",
        action="append",
        default=[],
        help="NAME=VALUE for a baseline operator measured first in the same run",
    )
    parser.add_argument("--smoke", action="store_true", help=f"a quick run: {SMOKE}")
    add_cluster_arguments(parser)
    args = parser.parse_args()
    if args.smoke:
        args.counts, args.kinds = SMOKE["counts"], SMOKE["kinds"]
        args.operator_env.append(SMOKE["operator_env"])
    args.counts = sorted(int(count) for count in args.counts.split(","))
    args.kinds = [kind for kind in args.kinds.split(",") if kind]
    if not args.counts or args.counts[0] < 1 or set(args.kinds) - {"external", "managed"}:
        parser.error("--counts must be positive; --kinds external and/or managed")
    progress, processes = Progress(), Descendants()
    root = Path(tempfile.mkdtemp(prefix="bench-memory-"))
    try:
        asyncio.run(measure(args, root, progress, processes))
    finally:
        processes.note()
        killed = processes.kill_survivors()
        shutil.rmtree(root, ignore_errors=True)
        progress(f"cleaned up; processes left running and killed now: {killed or 'none'}")


if __name__ == "__main__":
    main()
