"""Reconcile benchmark: the operator against a bare Automation API script, on the dev cluster.

    .venv/bin/python -m bench.reconcile [--repeat 3] [--many 50] [--fleet 200] [--smoke]
        [--cluster STATE_DIR]

Starts a dev cluster (or uses the running one `--cluster` names), an origin
in this process that the health probes fetch through the proxies, and the
real operator (`egress-proxies run`, concurrency 4, its `pulumi` wrapped to
count processes, as in the e2e suite). Then, in one run:

1. Apply-to-Ready of one Proxy ÷ the same inline program (`squid_pod_program`
   bound to the inputs the operator gives it, by the operator's own `bind`)
   run by a bare Automation API script: `create_stack` on a fresh file://
   backend, `up`, the pod Ready (its name from the program's own
   `pod_name`), then one health probe through it. Both sides end at the
   same point, an authenticated request through the new Squid pod that
   succeeded: the operator's phase Ready means Provisioned (its `up`
   returned and it saw the pod Ready) plus a first passing health probe.
   Each side is warmed up once, untimed; then the median of `--repeat` runs,
   the two sides alternating (target ≤ 1.3).
2. `--many` Proxies applied at once to a second operator (started afresh,
   then warmed up with one Proxy): wall time until all are Ready ÷ (many *
   one bare run ÷ concurrency) (target ≤ 1.5), and pulumi processes started
   per Proxy (target ≤ 3), with `pulumi version` counted apart.
3. That operator's own RSS (VmRSS of its process, children excluded) with 0
   Proxies (before the warm-up) and with `--fleet` Ready Proxies.

CPU seconds per Proxy are printed beside the times, split by process
(harness/benchkit/cpu.py: the operator, its stack worker, the pulumi CLI, the
kubernetes plugin; the dev cluster, this process and every other process
apart), with their sum beside the machine's busy CPU (/proc/stat) in the
same window: on a small machine many `up`s at once are bound by CPU, not by
the concurrency setting. `--smoke`: one run per side, 2 at once, a fleet of
3, in a minute or two. Progress goes to stderr, results to stdout.
Everything started here (the operators, the cluster with its squids, pulumi)
is stopped at the end, its namespaces deleted, and the temp dir removed.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import secrets
import shutil
import statistics
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pulumi import automation as auto

from egress_proxies import toolchain
from egress_proxies.catalog import ProxyRecord, proxy_key
from egress_proxies.devcluster import KubeClient
from egress_proxies.devcluster.node import image_ref
from egress_proxies.health import HttpProber
from egress_proxies.kube.resources import PODS, SECRETS
from egress_proxies.model import ProxySpec, with_squid_image
from egress_proxies.proxies.credentials import credentials_secret, new_signing_key
from egress_proxies.proxies.reconcile import spec_hash
from egress_proxies.stacks.inputs import ProgramInputs, ProxyCredentials
from egress_proxies.stacks.naming import PROJECT, instance_name, stack_name
from egress_proxies.stacks.outputs import bind
from egress_proxies.stacks.programs.squid_pod import pod_name, squid_pod_program
from harness.benchkit.cluster import (
    BenchCluster,
    add_cluster_arguments,
    create_namespace,
    delete_namespace,
    dev_cluster,
)
from harness.benchkit.cpu import CpuMeter, PulumiGroups, Window, pulumi_groups
from harness.benchkit.operators import (
    CONCURRENCY,
    CPU_BY_PROCESS,
    CPU_SUM,
    POLL_ONE,
    RSS_SAMPLES,
    SETTLE_SECONDS,
    Descendants,
    Progress,
    Rss,
    SingleRun,
    apply_many,
    operator_pid,
    operator_run,
    running,
    sample_rss,
    summed,
    wait_operator_up,
)
from harness.cluster import wait_for
from harness.operator import (
    counting_pulumi_root,
    managed_proxy,
)
from harness.origins import serve_origin

SMOKE = {"repeat": 1, "many": 2, "fleet": 3}

# The figures the report promises, each on a line of its own (tests/*/test_bench_smoke.py).
SINGLE_RATIO = "ratio apply->Ready / bare up"
MANY_RATIO = "ratio at once / ideal"
PULUMI_PER_PROXY = "pulumi processes per Proxy"
RSS_PER_PROXY = "operator RSS per Proxy"
FIGURES = (SINGLE_RATIO, MANY_RATIO, PULUMI_PER_PROXY, RSS_PER_PROXY, CPU_BY_PROCESS, CPU_SUM)


# --- the bare Automation API script ------------------------------------------------------------


class BareScript:
    """The inline program run the plainest way: create_stack on a fresh backend, then up."""

    def __init__(self, root: Path, kubeconfig: Path, groups: PulumiGroups) -> None:
        self._root = root
        self._calls = root / "pulumi-calls.log"
        self._pulumi_root = counting_pulumi_root(root / "pulumi-root", self._calls, groups.joins())
        self._home = root / "pulumi-home"  # shared by every run, like a user's ~/.pulumi
        self._home.mkdir()
        self._kubeconfig = kubeconfig
        self._runs = 0

    def calls(self) -> list[str]:
        """Every pulumi command line the bare runs started so far."""
        return self._calls.read_text().splitlines() if self._calls.exists() else []

    def up(self, inputs: ProgramInputs) -> auto.Stack:
        """Create the stack on a backend of its own and `up` the operator's bound program."""
        self._runs += 1
        work = self._root / f"run-{self._runs}"
        backend = work / "backend"
        backend.mkdir(parents=True)
        program = bind(
            squid_pod_program,
            inputs,
            spec_hash=spec_hash(inputs.spec, None),
            provider=str(inputs.spec.provider),
        )
        url = f"file://{backend}"
        stack = auto.create_stack(
            stack_name(inputs.namespace, inputs.name),
            project_name=PROJECT,
            program=program,
            opts=auto.LocalWorkspaceOptions(
                work_dir=str(work),
                pulumi_home=str(self._home),
                env_vars={
                    "PULUMI_BACKEND_URL": url,
                    "PULUMI_CONFIG_PASSPHRASE": "bench-passphrase",
                    "PULUMI_SKIP_UPDATE_CHECK": "true",
                    "PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION": "true",
                    "KUBECONFIG": str(self._kubeconfig),
                    "PATH": toolchain.environment_with_tools()["PATH"],
                },
                secrets_provider="passphrase",
                project_settings=auto.ProjectSettings(
                    name=PROJECT, runtime="python", backend=auto.ProjectBackend(url=url)
                ),
                pulumi_command=auto.PulumiCommand(root=str(self._pulumi_root)),
            ),
        )
        stack.up(color="never")
        return stack

    @staticmethod
    def destroy(stack: auto.Stack) -> None:
        """Destroy the stack's resources and remove it (untimed)."""
        stack.destroy(color="never")
        stack.workspace.remove_stack(stack.name)
        shutil.rmtree(str(stack.workspace.work_dir), ignore_errors=True)


def bare_inputs(namespace: str, name: str, spec: ProxySpec) -> ProgramInputs:
    """What the operator would hand the program for a new Proxy with this spec.

    The image is the one the bench's operators are given (`--squid-image`).
    """
    uid = str(uuid.uuid4())
    return ProgramInputs(
        namespace=namespace,
        name=name,
        uid=uid,
        instance_name=instance_name(uid),
        spec=with_squid_image(spec, image_ref("squid")),
        credentials=ProxyCredentials("crawler", secrets.token_urlsafe(24), new_signing_key()),
    )


def bare_credentials_secret(inputs: ProgramInputs) -> dict[str, Any]:
    """The credentials Secret the operator makes before the first `up` (the pod mounts it);
    without the ownerReference, as no Proxy owns it here."""
    body = {"metadata": {"name": inputs.name, "namespace": inputs.namespace, "uid": inputs.uid}}
    secret = credentials_secret(body, inputs.credentials)
    del secret["metadata"]["ownerReferences"]
    return secret


async def ready_pod(kube: KubeClient, namespace: str, name: str) -> dict[str, Any]:
    """The pod once its Ready condition is True (`up` does not wait for it)."""

    async def ready() -> dict[str, Any] | None:
        pod = await kube.get(PODS.path(namespace, name))
        conditions = (pod.get("status") or {}).get("conditions") or []
        is_ready = any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)
        return pod if is_ready else None

    return await wait_for(ready, timeout=600, interval=POLL_ONE)


async def bare_run(
    bare: BareScript, kube: KubeClient, prober: HttpProber, inputs: ProgramInputs, meter: CpuMeter
) -> SingleRun:
    """Time create_stack + up + the pod Ready + one probe through it; then destroy, untimed."""
    calls_before, cpu_before = len(bare.calls()), meter.read()
    started = time.perf_counter()
    secret = await kube.create(SECRETS.path(inputs.namespace), bare_credentials_secret(inputs))
    stack = await asyncio.to_thread(bare.up, inputs)
    pod = await ready_pod(kube, inputs.namespace, pod_name(inputs))
    provisioned = time.perf_counter() - started
    record = ProxyRecord(
        key=proxy_key(inputs.namespace, inputs.name),
        uid=inputs.uid,
        namespace=inputs.namespace,
        name=inputs.name,
        scheme="http",
        host=pod["status"]["podIP"],
        port=inputs.port,
        health_check=inputs.spec.health_check,
        credentials=inputs.credentials,
    )
    result = await prober.probe(record)
    seconds, cpu = time.perf_counter() - started, meter.read().since(cpu_before)
    if not result.ok:
        raise RuntimeError(f"the probe through the bare proxy failed: {result.detail}")
    calls = tuple(bare.calls()[calls_before:])
    await asyncio.to_thread(bare.destroy, stack)
    await kube.delete(SECRETS.path(inputs.namespace, secret["metadata"]["name"]))
    return SingleRun(seconds, provisioned, cpu, calls)


# --- the operator --------------------------------------------------------------------------------


def command_kinds(calls: Sequence[str]) -> Counter[str]:
    """pulumi command lines by command (`version`, `stack init`, `up`, ...)."""
    kinds: Counter[str] = Counter()
    for call in calls:
        words = [word for word in call.split() if not word.startswith("-")]
        kind = " ".join(words[:2]) if words[:1] == ["stack"] else (words[0] if words else "")
        kinds[kind] += 1
    return kinds


def describe(kinds: Counter[str]) -> str:
    """`2 up, 1 stack init` style."""
    return ", ".join(f"{count} {kind}" for kind, count in kinds.most_common())


# --- the run -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Cluster:
    """What every phase uses: the dev cluster, an admin client, a prober, the Proxy spec."""

    bench: BenchCluster
    kube: KubeClient
    prober: HttpProber
    spec: dict[str, Any]  # every Proxy's spec: the health probe fetches the local origin


@dataclass(frozen=True)
class SingleResults:
    """Phase 1: the timed runs of each side."""

    bare: list[SingleRun]
    operator: list[SingleRun]


@dataclass(frozen=True)
class ManyResults:
    """Phase 2, on a freshly started operator."""

    warm_up_seconds: float
    seconds: float
    cpu: Window
    calls: Counter[str]  # during the many, by command
    versions: int  # `pulumi version` over the operator's whole life


async def measure_single(
    cluster: Cluster, root: Path, repeat: int, progress: Progress, processes: Descendants
) -> SingleResults:
    """One Proxy at a time: a warm-up each, then `repeat` timed runs per side, alternating."""
    kube = cluster.kube
    bare_namespace = await create_namespace(kube, "bench-bare")
    namespace = await create_namespace(kube, "bench-single")
    spec = ProxySpec.model_validate(managed_proxy("any", **cluster.spec)["spec"])
    work = root / "operator-single"
    work.mkdir()
    with (
        pulumi_groups("bare") as bare_groups,
        running(cluster.bench, namespace, work, processes) as op,
    ):
        bare = BareScript(root / "bare", cluster.bench.handle.kubeconfig, bare_groups)
        bare_meter = CpuMeter(cluster.bench.supervisor, bare_groups)
        await wait_operator_up(op.process)
        progress("1. one Proxy: warming up both sides (untimed)")
        warm = bare_inputs(bare_namespace, "warm", spec)
        await bare_run(bare, kube, cluster.prober, warm, bare_meter)
        await operator_run(kube, op, "warm", cluster.spec)
        results = SingleResults([], [])
        for index in range(repeat):
            inputs = bare_inputs(bare_namespace, f"b{index}", spec)
            results.bare.append(await bare_run(bare, kube, cluster.prober, inputs, bare_meter))
            progress(f"  bare run {index + 1}: {results.bare[-1].seconds:.2f} s")
            results.operator.append(await operator_run(kube, op, f"p{index}", cluster.spec))
            progress(f"  operator run {index + 1}: {results.operator[-1].seconds:.2f} s")
    await delete_namespace(kube, namespace)
    await delete_namespace(kube, bare_namespace)
    return results


async def measure_fleet(
    cluster: Cluster,
    root: Path,
    args: argparse.Namespace,
    single: SingleResults,
    progress: Progress,
    processes: Descendants,
) -> None:
    """`--many` Proxies at once on a new operator, then up to `--fleet`; RSS before and after.

    Prints each phase's report as soon as it is measured.
    """
    kube = cluster.kube
    namespace = await create_namespace(kube, "bench-fleet")
    work = root / "operator-fleet"
    work.mkdir()
    with running(cluster.bench, namespace, work, processes) as metered:
        op = metered.process
        await wait_operator_up(op)
        await asyncio.sleep(SETTLE_SECONDS)
        progress("3. operator RSS with 0 Proxies")
        rss_zero = await sample_rss(operator_pid(op))
        progress("2. warming the new operator up with one Proxy (untimed)")
        warm_up = await operator_run(kube, metered, "warm", cluster.spec)

        progress(f"2. {args.many} Proxies applied at once")
        names = [f"m{index:03d}" for index in range(args.many)]
        calls_before, cpu_before = len(op.pulumi_invocations()), metered.meter.read()
        seconds = await apply_many(kube, op, names, cluster.spec, progress)
        many = ManyResults(
            warm_up_seconds=warm_up.seconds,
            seconds=seconds,
            cpu=metered.meter.read().since(cpu_before),
            calls=command_kinds(op.pulumi_invocations()[calls_before:]),
            versions=command_kinds(op.pulumi_invocations())["version"],
        )
        report_many(args, single, many)

        rest = [f"f{index:03d}" for index in range(args.many, args.fleet)]
        progress(f"3. {len(rest)} more Proxies applied at once, for a fleet of {args.fleet}")
        rest_seconds = await apply_many(kube, op, rest, cluster.spec, progress)
        await asyncio.sleep(SETTLE_SECONDS)
        progress(f"3. operator RSS with {args.fleet} Proxies")
        report_rss(args, rss_zero, await sample_rss(operator_pid(op)), rest_seconds)
        progress("stopping the operator")
    await delete_namespace(kube, namespace)


async def measure(
    args: argparse.Namespace, root: Path, progress: Progress, processes: Descendants
) -> None:
    """Every phase on one dev cluster; prints the report."""
    progress("starting the dev cluster" if args.cluster is None else "using the dev cluster")
    with dev_cluster(args, root / "cluster") as bench_cluster:
        async with (
            KubeClient(bench_cluster.handle.credentials) as kube,
            serve_origin() as origin,
            HttpProber() as prober,
        ):
            spec = {"healthCheck": {"url": origin.url, "expectedStatus": 200}}
            cluster = Cluster(bench_cluster, kube, prober, spec)
            single = await measure_single(cluster, root, args.repeat, progress, processes)
            report_single(single)
            await measure_fleet(cluster, root, args, single, progress, processes)
            processes.note()
        progress("done with the dev cluster")


def report_single(single: SingleResults) -> None:
    """Phase 1's numbers and ratio."""
    bare, ours = median_seconds(single.bare), median_seconds(single.operator)
    print("1. one Proxy: from the create call until a request through its Squid pod succeeded")
    print(
        f"   bare Automation API script: {bare:6.2f} s  median of {len(single.bare)} "
        f"[{listed(single.bare)}]"
        f"\n     create_stack + up returned and the pod Ready after "
        f"{median(run.provisioned_seconds for run in single.bare):.2f} s; "
        f"then one probe through it; pulumi processes: "
        f"{describe(command_kinds(single.bare[-1].pulumi_calls))}"
    )
    for line in summed(single.bare).lines(len(single.bare)):
        print(f"     {line}")
    print(
        f"   operator, apply -> phase Ready: {ours:6.2f} s  median [{listed(single.operator)}]"
        f"\n     Provisioned=True after "
        f"{median(run.provisioned_seconds for run in single.operator):.2f} s; "
        f"Ready after its first health probe; pulumi processes: "
        f"{describe(command_kinds(single.operator[-1].pulumi_calls))}"
    )
    for line in summed(single.operator).lines(len(single.operator)):
        print(f"     {line}")
    print(f"   {SINGLE_RATIO}: {ours / bare:.2f}  (target <= 1.3)")


def report_many(args: argparse.Namespace, single: SingleResults, many: ManyResults) -> None:
    """Phase 2's numbers and ratios."""
    bare = median_seconds(single.bare)
    ideal = args.many * bare / CONCURRENCY
    cores = len(os.sched_getaffinity(0))
    # What one bare run costs this bench's processes and the dev cluster, whatever else runs.
    bare_cpu = summed(single.bare).named / len(single.bare)
    cpu_floor = args.many * bare_cpu / cores
    print(
        f"2. {args.many} Proxies applied at once, concurrency {CONCURRENCY} "
        f"(after one untimed Proxy: {many.warm_up_seconds:.2f} s)"
    )
    print(
        f"   all Ready after {many.seconds:.1f} s; "
        f"{args.many} x {bare:.2f} s / {CONCURRENCY} = {ideal:.1f} s"
    )
    print(f"   {MANY_RATIO}: {many.seconds / ideal:.2f}  (target <= 1.5)")
    print(
        f"   bare runs bound by this machine's CPU instead: {args.many} x {bare_cpu:.2f} "
        f"CPU s (the script, pulumi, the dev cluster) / {cores} cores = {cpu_floor:.1f} s; "
        f"ratio to that: "
        f"{many.seconds / cpu_floor:.2f}"
    )
    print(f"   the machine's {cores} cores were {many.cpu.fraction:.0%} busy meanwhile")
    for line in many.cpu.lines(args.many):
        print(f"   {line}")
    print(
        f"   {PULUMI_PER_PROXY}: {sum(many.calls.values()) / args.many:.2f}  "
        f"(target <= 3; {describe(many.calls)}); `pulumi version` since the operator "
        f"started: {many.versions}"
    )


def report_rss(args: argparse.Namespace, zero: Rss, fleet: Rss, rest_seconds: float) -> None:
    """Phase 3's numbers."""
    print(f"3. operator RSS (VmRSS of its own process, median of {RSS_SAMPLES} samples)")
    print(f"   0 Proxies: {zero.current / 1024:7.1f} MiB")
    print(
        f"   {args.fleet} Ready Proxies: {fleet.current / 1024:7.1f} MiB "
        f"(peak {fleet.peak / 1024:.1f} MiB; the last {args.fleet - args.many} "
        f"applied at once were all Ready after {rest_seconds:.1f} s)"
    )
    print(f"   {RSS_PER_PROXY}: {(fleet.current - zero.current) / args.fleet:.1f} KiB")


def median(values: Iterable[float]) -> float:
    """statistics.median, typed for floats."""
    return float(statistics.median(values))


def listed(runs: list[SingleRun]) -> str:
    """Each run's seconds, in order."""
    return ", ".join(f"{run.seconds:.2f}" for run in runs)


def median_seconds(runs: list[SingleRun]) -> float:
    """The median wall time of some runs."""
    return median(run.seconds for run in runs)


def main() -> None:
    """Parse the sizes, run, clean up, print."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--repeat", type=int, default=3, help="timed single-Proxy runs per side")
    parser.add_argument("--many", type=int, default=50, help="Proxies applied at once")
    parser.add_argument("--fleet", type=int, default=200, help="Ready Proxies for the RSS reading")
    parser.add_argument("--smoke", action="store_true", help=f"a quick run: {SMOKE}")
    add_cluster_arguments(parser)
    args = parser.parse_args()
    if args.smoke:
        vars(args).update(SMOKE)
    if args.repeat < 1 or args.many < 1 or args.fleet < args.many:
        parser.error("need --repeat >= 1, --many >= 1 and --fleet >= --many")
    progress, processes = Progress(), Descendants()
    root = Path(tempfile.mkdtemp(prefix="bench-reconcile-"))
    try:
        asyncio.run(measure(args, root, progress, processes))
    finally:
        processes.note()
        killed = processes.kill_survivors()
        shutil.rmtree(root, ignore_errors=True)
        progress(f"cleaned up; processes left running and killed now: {killed or 'none'}")


if __name__ == "__main__":
    main()
