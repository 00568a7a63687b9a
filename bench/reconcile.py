"""Reconcile benchmark: the operator against a bare Automation API script, on the dev cluster.

    .venv/bin/python -m bench.reconcile [--repeat 3] [--many 50] [--fleet 200]

Starts a dev cluster (real kube-apiserver; the loopback kubelet runs each
Squid pod as a real squid), an origin in this process that the health probes
fetch through the proxies, and the real operator (`egress-proxies run`,
concurrency 4, its `pulumi` wrapped to count processes, as in the e2e suite).
Then, in one run:

1. Apply-to-Ready of one Proxy ÷ the same inline program (`squid_pod_program`
   with the inputs the operator gives it) run by a bare Automation API script:
   `create_stack` on a fresh file:// backend, `up`, then one health probe
   through the new proxy. Both sides end at the same point, an authenticated
   request through the new Squid pod that succeeded: the operator's phase
   Ready means Provisioned (its `up` returned, and the kubernetes provider
   awaits the pod's Ready condition) plus a first passing health probe. Each
   side is warmed up once, untimed; then the median of `--repeat` runs, the
   two sides alternating (target ≤ 1.3).
2. `--many` Proxies applied at once to a second operator (started afresh,
   then warmed up with one Proxy): wall time until all are Ready ÷ (many *
   one bare run ÷ concurrency) (target ≤ 1.5), and pulumi processes started
   per Proxy (target ≤ 3), with `pulumi version` counted apart.
3. That operator's own RSS (VmRSS of its process, children excluded) with 0
   Proxies (before the warm-up) and with `--fleet` Ready Proxies.

CPU seconds are printed beside the times, for each side's processes and for
the whole machine (/proc/stat): on a small machine many `up`s at once are
bound by CPU, not by the concurrency setting. Progress goes to stderr,
results to stdout. Everything started here (the operators, the cluster with
its squids, pulumi) is stopped at the end, and the temp dir removed.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import resource
import secrets
import shutil
import signal
import statistics
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pulumi
from pulumi import automation as auto

from egress_proxies import toolchain
from egress_proxies.catalog import ProxyRecord, proxy_key
from egress_proxies.devcluster import KubeClient
from egress_proxies.devcluster.cluster import stop as dev_cluster_down
from egress_proxies.health import HttpProber
from egress_proxies.kube.resources import NAMESPACES, PODS, SERVICE_ACCOUNTS
from egress_proxies.model import PROVISIONED, ProxySpec, find_condition
from egress_proxies.operator.reconcile import spec_hash
from egress_proxies.operator.status import status_of
from egress_proxies.stacks.inputs import ProgramInputs, ProxyCredentials
from egress_proxies.stacks.naming import PROJECT, instance_name, stack_name
from egress_proxies.stacks.programs.squid_pod import squid_pod_program
from harness.cluster import ClusterHandle, start_supervised_cluster, wait_for
from harness.operator import (
    OperatorProcess,
    counting_pulumi_root,
    descendants,
    managed_proxy,
    new_operator,
    proxy_path,
    wait_gone,
)
from harness.origins import serve_origin

CONCURRENCY = 4  # `egress-proxies run --concurrency`'s default
POLL_ONE = 0.1  # seconds between reads of one Proxy while timing it
POLL_MANY = 1.0  # seconds between lists of the namespace's Proxies
PROGRESS_EVERY = 15.0
SETTLE_SECONDS = 5.0
RSS_SAMPLES = 5
STOP_GRACE_SECONDS = 60.0
STALL_SECONDS = 180.0
OPERATOR_ENV = {"EGRESS_PROXIES_CONCURRENCY": str(CONCURRENCY)}


class Progress:
    """Timestamped progress lines on stderr."""

    def __init__(self) -> None:
        self._started = time.monotonic()

    def __call__(self, message: str) -> None:
        sys.stdout.flush()  # the report's lines first, when both go to one file
        print(f"[bench {time.monotonic() - self._started:5.0f}s] {message}", file=sys.stderr)


@dataclass(frozen=True)
class SingleRun:
    """One timed create-to-Ready: the total, and when the proxy had its address."""

    seconds: float
    provisioned_seconds: float
    cpu_seconds: float  # the measured side's processes
    machine_cpu_seconds: float  # every process on the machine: the dev cluster's too
    pulumi_calls: tuple[str, ...]


@dataclass(frozen=True)
class Share:
    """CPU seconds the whole machine spent busy, of the CPU seconds that passed (all cores)."""

    busy: float
    total: float

    @classmethod
    def now(cls) -> Share:
        """The machine's counters since boot, from /proc/stat."""
        fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]
        user, nice, system, idle, iowait, irq, softirq, steal = (int(f) for f in fields)
        busy = user + nice + system + irq + softirq + steal
        hertz = os.sysconf("SC_CLK_TCK")
        return cls(busy / hertz, (busy + idle + iowait) / hertz)

    def since(self, earlier: Share) -> Share:
        """What passed between `earlier` and this reading."""
        return Share(self.busy - earlier.busy, self.total - earlier.total)

    @property
    def fraction(self) -> float:
        """Busy ÷ total."""
        return self.busy / self.total if self.total else 0.0


@dataclass(frozen=True)
class Rss:
    """The operator process's resident memory in KiB: now (median of samples) and peak.

    `anonymous` is the part of `current` not backed by files (the heap, thread
    stacks); the rest is code and data pages of the interpreter and its
    extension libraries, which grow when a library is first used.
    """

    current: int
    peak: int
    anonymous: int = 0


@contextlib.contextmanager
def dev_cluster(state: Path) -> Iterator[ClusterHandle]:
    """A dev cluster whose supervisor is a child of this process (it dies with it)."""
    supervisor, handle = start_supervised_cluster(state, state / "bench-pids")
    try:
        yield handle
    finally:
        # `dev-cluster down`: a large fleet can outlast the grace period; then the
        # supervisor is killed (the kernel takes its children along) and what its pid
        # files still name is reaped, its pod dirs removed.
        dev_cluster_down(state, timeout=STOP_GRACE_SECONDS)
        supervisor.stop()


@contextlib.contextmanager
def running(operator: OperatorProcess, processes: Descendants) -> Iterator[OperatorProcess]:
    """The operator started, and stopped (SIGTERM, then its process group) on exit."""
    operator.start()
    try:
        yield operator
    finally:
        processes.note()  # pulumi runs plugins in their own groups: check them afterwards
        operator.stop()


async def create_namespace(kube: KubeClient, stem: str) -> str:
    """A fresh namespace, once its default ServiceAccount exists."""
    name = f"{stem}-{secrets.token_hex(3)}"
    await kube.create(NAMESPACES.path(), {"metadata": {"name": name}})

    async def has_account() -> bool:
        listing = await kube.get(SERVICE_ACCOUNTS.path(name))
        return any(item["metadata"]["name"] == "default" for item in listing["items"])

    await wait_for(has_account, timeout=60)
    return name


async def wait_operator_up(operator: OperatorProcess) -> None:
    """Until the operator's metrics endpoint answers (it starts just before kopf)."""

    async def answers() -> bool:
        try:
            async with aiohttp.ClientSession() as session, session.get(operator.metrics_url) as r:
                return r.status == 200
        except aiohttp.ClientError:
            if operator.child is not None and not operator.child.alive():
                raise RuntimeError(f"the operator exited:\n{operator.log_text()[-3000:]}") from None
            return False

    await wait_for(answers, timeout=60, interval=0.2)


def rss_kib(pid: int) -> tuple[int, int, int]:
    """VmRSS, VmHWM and RssAnon of one process (its threads included, its children not)."""
    fields = dict(
        line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines()
    )
    rss, peak, anonymous = (int(fields[name].split()[0]) for name in ("VmRSS", "VmHWM", "RssAnon"))
    return rss, peak, anonymous


async def sample_rss(pid: int) -> Rss:
    """The median of a few RSS samples a second apart, and the peak so far."""
    samples, anonymous = [], []
    for _ in range(RSS_SAMPLES):
        current, _, anon = rss_kib(pid)
        samples.append(current)
        anonymous.append(anon)
        await asyncio.sleep(1.0)
    return Rss(int(statistics.median(samples)), rss_kib(pid)[1], int(statistics.median(anonymous)))


def operator_pid(operator: OperatorProcess) -> int:
    """The operator's pid (setpriv execs it in place)."""
    assert operator.child is not None, "the operator is started"
    return operator.child.process.pid


def own_cpu_seconds() -> float:
    """CPU time of this process and of its children that were waited for."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def cpu_seconds(pid: int) -> float:
    """CPU time of a process and of its children that were waited for (pulumi and its plugins)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return sum(int(tick) for tick in fields[11:15]) / os.sysconf("SC_CLK_TCK")


# --- the bare Automation API script ------------------------------------------------------------


class BareScript:
    """The inline program run the plainest way: create_stack on a fresh backend, then up."""

    def __init__(self, root: Path, kubeconfig: Path) -> None:
        self._root = root
        self._calls = root / "pulumi-calls.log"
        self._pulumi_root = counting_pulumi_root(root / "pulumi-root", self._calls)
        self._home = root / "pulumi-home"  # shared by every run, like a user's ~/.pulumi
        self._home.mkdir()
        self._kubeconfig = kubeconfig
        self._runs = 0

    def calls(self) -> list[str]:
        """Every pulumi command line the bare runs started so far."""
        return self._calls.read_text().splitlines() if self._calls.exists() else []

    def up(self, inputs: ProgramInputs, wanted_hash: str) -> tuple[auto.Stack, dict[str, Any]]:
        """Create the stack on a backend of its own and `up` it; return it and its outputs."""
        self._runs += 1
        work = self._root / f"run-{self._runs}"
        backend = work / "backend"
        backend.mkdir(parents=True)

        def program() -> None:
            squid_pod_program(inputs)
            pulumi.export("specHash", wanted_hash)
            pulumi.export("proxyUid", inputs.uid)
            pulumi.export("provider", str(inputs.spec.provider))

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
        result = stack.up(color="never")
        return stack, {key: output.value for key, output in result.outputs.items()}

    @staticmethod
    def destroy(stack: auto.Stack) -> None:
        """Destroy the stack's resources and remove it (untimed)."""
        stack.destroy(color="never")
        stack.workspace.remove_stack(stack.name)
        shutil.rmtree(str(stack.workspace.work_dir), ignore_errors=True)


def bare_inputs(namespace: str, name: str, spec: ProxySpec) -> ProgramInputs:
    """What the operator would hand the program for a new Proxy with this spec."""
    uid = str(uuid.uuid4())
    return ProgramInputs(
        namespace=namespace,
        name=name,
        uid=uid,
        instance_name=instance_name(uid),
        spec=spec,
        credentials=ProxyCredentials("crawler", secrets.token_urlsafe(24)),
    )


async def bare_run(
    bare: BareScript, kube: KubeClient, prober: HttpProber, inputs: ProgramInputs
) -> SingleRun:
    """Time create_stack + up + one probe through the new proxy; then destroy, untimed."""
    calls_before, cpu_before, machine_before = len(bare.calls()), own_cpu_seconds(), Share.now()
    started = time.perf_counter()
    stack, outputs = await asyncio.to_thread(bare.up, inputs, spec_hash(inputs.spec, None))
    provisioned = time.perf_counter() - started
    pod = await kube.get(PODS.path(inputs.namespace, inputs.instance_name))
    conditions = (pod.get("status") or {}).get("conditions") or []
    if not any(c["type"] == "Ready" and c["status"] == "True" for c in conditions):
        raise RuntimeError(f"up returned before pod {inputs.instance_name} was Ready")
    record = ProxyRecord(
        key=proxy_key(inputs.namespace, inputs.name),
        uid=inputs.uid,
        namespace=inputs.namespace,
        name=inputs.name,
        scheme="http",
        host=outputs["ip"],
        port=int(outputs["port"]),
        health_check=inputs.spec.health_check,
        credentials=inputs.credentials,
    )
    result = await prober.probe(record)
    seconds, cpu = time.perf_counter() - started, own_cpu_seconds() - cpu_before
    machine = Share.now().since(machine_before)
    if not result.ok:
        raise RuntimeError(f"the probe through the bare proxy failed: {result.detail}")
    calls = tuple(bare.calls()[calls_before:])
    await asyncio.to_thread(bare.destroy, stack)
    return SingleRun(seconds, provisioned, cpu, machine.busy, calls)


# --- the operator --------------------------------------------------------------------------------


def phase(body: dict[str, Any]) -> str:
    """The Proxy's status.phase ('' before the first status write)."""
    return str((body.get("status") or {}).get("phase") or "")


def failed(body: dict[str, Any]) -> RuntimeError:
    """The error for a Proxy that went Failed."""
    provisioned = find_condition(status_of(body).conditions, PROVISIONED)
    message = provisioned.message if provisioned else ""
    return RuntimeError(f"Proxy {body['metadata']['name']} is Failed: {message}")


async def operator_run(
    kube: KubeClient, operator: OperatorProcess, name: str, spec: dict[str, Any]
) -> SingleRun:
    """Time one Proxy from its create call to phase Ready; then delete it, untimed."""
    calls_before = len(operator.pulumi_invocations())
    cpu_before, machine_before = cpu_seconds(operator_pid(operator)), Share.now()
    started = time.perf_counter()
    await kube.create(proxy_path(operator.namespace), managed_proxy(name, **spec))
    provisioned = None
    while True:
        body = await kube.get(proxy_path(operator.namespace, name))
        seconds = time.perf_counter() - started
        condition = find_condition(status_of(body).conditions, PROVISIONED)
        if provisioned is None and condition is not None and condition.status == "True":
            provisioned = seconds
        if phase(body) == "Ready":
            break
        if phase(body) == "Failed":
            raise failed(body)
        if seconds > 600:
            raise RuntimeError(f"Proxy {name} not Ready after 600 s: {body.get('status')}")
        await asyncio.sleep(POLL_ONE)
    cpu = cpu_seconds(operator_pid(operator)) - cpu_before
    machine = Share.now().since(machine_before)
    calls = tuple(operator.pulumi_invocations()[calls_before:])
    await kube.delete(proxy_path(operator.namespace, name))
    await wait_gone(kube, proxy_path(operator.namespace, name), timeout=300)
    return SingleRun(
        seconds, provisioned if provisioned is not None else seconds, cpu, machine.busy, calls
    )


async def apply_many(
    kube: KubeClient,
    operator: OperatorProcess,
    names: list[str],
    spec: dict[str, Any],
    progress: Progress,
) -> float:
    """Create every Proxy at once; return the seconds until all of them are Ready.

    Fails when no Proxy has become Ready for STALL_SECONDS: a stalled operator
    should end the run, not keep it waiting.
    """
    namespace = operator.namespace
    started = time.perf_counter()
    await asyncio.gather(
        *(kube.create(proxy_path(namespace), managed_proxy(name, **spec)) for name in names)
    )
    wanted, reported = set(names), started
    ready, last_change = 0, started
    while True:
        listing = await kube.get(proxy_path(namespace))
        now = time.perf_counter()
        mine = [item for item in listing["items"] if item["metadata"]["name"] in wanted]
        for item in mine:
            if phase(item) == "Failed":
                raise failed(item)
        phases = Counter(phase(item) for item in mine)
        if phases["Ready"] == len(wanted):
            return now - started
        shown = ", ".join(f"{count} {name or 'no status'}" for name, count in phases.items())
        if phases["Ready"] != ready:
            ready, last_change = phases["Ready"], now
        elif now - last_change > STALL_SECONDS:
            raise RuntimeError(
                f"no Proxy became Ready for {STALL_SECONDS:.0f} s ({shown}); "
                f"the operator's log ends:\n{operator.log_text()[-3000:]}"
            )
        if now - reported >= PROGRESS_EVERY:
            reported = now
            progress(f"  {now - started:5.0f} s: {shown}")
        await asyncio.sleep(POLL_MANY)


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

    handle: ClusterHandle
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
    cpu: float  # the operator's and its pulumi processes'
    machine: Share
    calls: Counter[str]  # during the many, by command
    versions: int  # `pulumi version` over the operator's whole life


async def measure_single(
    cluster: Cluster, root: Path, repeat: int, progress: Progress, processes: Descendants
) -> SingleResults:
    """One Proxy at a time: a warm-up each, then `repeat` timed runs per side, alternating."""
    kube = cluster.kube
    bare = BareScript(root / "bare", cluster.handle.kubeconfig)
    bare_namespace = await create_namespace(kube, "bench-bare")
    namespace = await create_namespace(kube, "bench-single")
    spec = ProxySpec.model_validate(managed_proxy("any", **cluster.spec)["spec"])
    work = root / "operator-single"
    work.mkdir()
    with running(
        new_operator(cluster.handle.kubeconfig, namespace, work, OPERATOR_ENV), processes
    ) as op:
        await wait_operator_up(op)
        progress("1. one Proxy: warming up both sides (untimed)")
        await bare_run(bare, kube, cluster.prober, bare_inputs(bare_namespace, "warm", spec))
        await operator_run(kube, op, "warm", cluster.spec)
        results = SingleResults([], [])
        for index in range(repeat):
            inputs = bare_inputs(bare_namespace, f"b{index}", spec)
            results.bare.append(await bare_run(bare, kube, cluster.prober, inputs))
            progress(f"  bare run {index + 1}: {results.bare[-1].seconds:.2f} s")
            results.operator.append(await operator_run(kube, op, f"p{index}", cluster.spec))
            progress(f"  operator run {index + 1}: {results.operator[-1].seconds:.2f} s")
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
    with running(
        new_operator(cluster.handle.kubeconfig, namespace, work, OPERATOR_ENV), processes
    ) as op:
        await wait_operator_up(op)
        await asyncio.sleep(SETTLE_SECONDS)
        progress("3. operator RSS with 0 Proxies")
        rss_zero = await sample_rss(operator_pid(op))
        progress("2. warming the new operator up with one Proxy (untimed)")
        warm_up = await operator_run(kube, op, "warm", cluster.spec)

        progress(f"2. {args.many} Proxies applied at once")
        names = [f"m{index:03d}" for index in range(args.many)]
        calls_before = len(op.pulumi_invocations())
        cpu_before, machine_before = cpu_seconds(operator_pid(op)), Share.now()
        seconds = await apply_many(kube, op, names, cluster.spec, progress)
        many = ManyResults(
            warm_up_seconds=warm_up.seconds,
            seconds=seconds,
            cpu=cpu_seconds(operator_pid(op)) - cpu_before,
            machine=Share.now().since(machine_before),
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


async def measure(
    args: argparse.Namespace, root: Path, progress: Progress, processes: Descendants
) -> None:
    """Every phase on one dev cluster under `root`; prints the report."""
    progress("starting the dev cluster")
    with dev_cluster(root / "cluster") as handle:
        async with (
            KubeClient(handle.credentials) as kube,
            serve_origin() as origin,
            HttpProber() as prober,
        ):
            spec = {"healthCheck": {"url": origin.url, "expectedStatus": 200}}
            cluster = Cluster(handle, kube, prober, spec)
            single = await measure_single(cluster, root, args.repeat, progress, processes)
            report_single(single)
            await measure_fleet(cluster, root, args, single, progress, processes)
            processes.note()
        progress("stopping the dev cluster")


def report_single(single: SingleResults) -> None:
    """Phase 1's numbers and ratio."""
    bare, ours = median_seconds(single.bare), median_seconds(single.operator)
    print("1. one Proxy: from the create call until a request through its Squid pod succeeded")
    print(
        f"   bare Automation API script: {bare:6.2f} s  median of {len(single.bare)} "
        f"[{listed(single.bare)}]"
        f"\n     create_stack + up returned, the pod Ready: "
        f"{median(run.provisioned_seconds for run in single.bare):.2f} s; "
        f"then one probe through it"
        f"\n     CPU {median(run.cpu_seconds for run in single.bare):.2f} s "
        f"(this process + pulumi + plugin), machine-wide "
        f"{median(run.machine_cpu_seconds for run in single.bare):.2f} s; pulumi processes: "
        f"{describe(command_kinds(single.bare[-1].pulumi_calls))}"
    )
    print(
        f"   operator, apply -> phase Ready: {ours:6.2f} s  median [{listed(single.operator)}]"
        f"\n     Provisioned=True after "
        f"{median(run.provisioned_seconds for run in single.operator):.2f} s; "
        f"Ready after its first health probe"
        f"\n     CPU {median(run.cpu_seconds for run in single.operator):.2f} s "
        f"(operator + pulumi + plugin), machine-wide "
        f"{median(run.machine_cpu_seconds for run in single.operator):.2f} s; pulumi processes: "
        f"{describe(command_kinds(single.operator[-1].pulumi_calls))}"
    )
    print(f"   ratio operator / bare: {ours / bare:.2f}  (target <= 1.3)")


def report_many(args: argparse.Namespace, single: SingleResults, many: ManyResults) -> None:
    """Phase 2's numbers and ratios."""
    bare = median_seconds(single.bare)
    ideal = args.many * bare / CONCURRENCY
    cores = len(os.sched_getaffinity(0))
    bare_machine = median(run.machine_cpu_seconds for run in single.bare)
    cpu_floor = args.many * bare_machine / cores
    print(
        f"2. {args.many} Proxies applied at once, concurrency {CONCURRENCY} "
        f"(after one untimed Proxy: {many.warm_up_seconds:.2f} s)"
    )
    print(
        f"   all Ready after {many.seconds:.1f} s; "
        f"{args.many} x {bare:.2f} s / {CONCURRENCY} = {ideal:.1f} s"
    )
    print(f"   ratio: {many.seconds / ideal:.2f}  (target <= 1.5)")
    print(
        f"   bare runs bound by this machine's CPU instead: {args.many} x {bare_machine:.2f} "
        f"machine-wide CPU s / {cores} cores = {cpu_floor:.1f} s; ratio to that: "
        f"{many.seconds / cpu_floor:.2f}"
    )
    print(
        f"   the machine's {cores} cores were {many.machine.fraction:.0%} busy meanwhile: "
        f"{many.machine.busy / args.many:.2f} CPU s per Proxy, of which the operator and its "
        f"pulumi processes {many.cpu / args.many:.2f} (the rest: the dev cluster, its "
        f"squids, this process, other work on the machine)"
    )
    print(
        f"   pulumi processes per Proxy: {sum(many.calls.values()) / args.many:.2f}  "
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
    print(f"   per Proxy: {(fleet.current - zero.current) / args.fleet:.1f} KiB")


def median(values: Iterable[float]) -> float:
    """statistics.median, typed for floats."""
    return float(statistics.median(values))


def listed(runs: list[SingleRun]) -> str:
    """Each run's seconds, in order."""
    return ", ".join(f"{run.seconds:.2f}" for run in runs)


def median_seconds(runs: list[SingleRun]) -> float:
    """The median wall time of some runs."""
    return median(run.seconds for run in runs)


class Descendants:
    """The processes this run started, noted by pid and start time (a reused pid is not ours)."""

    def __init__(self) -> None:
        self._seen: set[tuple[int, str]] = set()

    def note(self) -> None:
        """Remember every process below this one right now."""
        for pid in descendants(os.getpid()):
            started = _start_time(pid)
            if started is not None:
                self._seen.add((pid, started))

    def kill_survivors(self) -> list[str]:
        """SIGKILL any noted process still alive; describe each."""
        killed = []
        for pid, started in sorted(self._seen):
            if _start_time(pid) != started:
                continue
            with contextlib.suppress(OSError):
                command = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
                os.kill(pid, signal.SIGKILL)
                killed.append(f"{pid} {command[:80]}")
        return killed


def _start_time(pid: int) -> str | None:
    """The process's start time in clock ticks, or None once it is gone (or a zombie)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return None if fields[0] == "Z" else fields[19]


def main() -> None:
    """Parse the sizes, run, clean up, print."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--repeat", type=int, default=3, help="timed single-Proxy runs per side")
    parser.add_argument("--many", type=int, default=50, help="Proxies applied at once")
    parser.add_argument("--fleet", type=int, default=200, help="Ready Proxies for the RSS reading")
    args = parser.parse_args()
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
