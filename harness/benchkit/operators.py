"""Running the real operator for a benchmark: start it metered, time Proxies to Ready, clean up.

The benchmarks that start `egress-proxies run` on the dev cluster
(`bench.reconcile`, `bench.pools`, `bench.memory`, `bench.crawl`) share this:
an operator started with its CPU metered (`running`), Proxies timed from
their create call to phase Ready one at a time (`operator_run`) or many at
once (`apply_many`), the operator's resident memory (`sample_rss`), progress
lines on stderr, and the processes a run started, killed at its end if any
survived (`Descendants`).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import statistics
import sys
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from functools import reduce
from pathlib import Path
from typing import Any

import aiohttp

from egress_proxies.devcluster import KubeClient
from egress_proxies.model import PROVISIONED, find_condition
from egress_proxies.proxies.status import status_of
from harness.benchkit.cluster import BenchCluster
from harness.benchkit.cpu import CpuMeter, Window, pulumi_groups
from harness.cluster import wait_for
from harness.operator import (
    OperatorProcess,
    descendants,
    managed_proxy,
    new_operator,
    proxy_path,
    wait_gone,
)

CONCURRENCY = 4  # `egress-proxies run --concurrency`'s default
POLL_ONE = 0.1  # seconds between reads of one Proxy (or pod) while timing it
POLL_MANY = 1.0  # seconds between lists of the namespace's Proxies
PROGRESS_EVERY = 15.0
SETTLE_SECONDS = 5.0
RSS_SAMPLES = 5
STALL_SECONDS = 180.0
OPERATOR_ENV = {"EGRESS_PROXIES_CONCURRENCY": str(CONCURRENCY)}
CPU_BY_PROCESS = "CPU s per Proxy, by process"
CPU_SUM = "sum of those processes"


class Progress:
    """Timestamped progress lines on stderr."""

    def __init__(self) -> None:
        self._started = time.monotonic()

    def __call__(self, message: str) -> None:
        sys.stdout.flush()  # the report's lines first, when both go to one file
        print(f"[bench {time.monotonic() - self._started:5.0f}s] {message}", file=sys.stderr)


@dataclass(frozen=True)
class SingleRun:
    """One timed create-to-Ready: the total, when the pod was Ready, and the CPU spent."""

    seconds: float
    provisioned_seconds: float
    cpu: Window
    pulumi_calls: tuple[str, ...]


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


@dataclass(frozen=True)
class MeteredOperator:
    """A running operator and the meter of its CPU (its pulumi runs in `groups`)."""

    process: OperatorProcess
    meter: CpuMeter


@contextlib.contextmanager
def running(
    cluster: BenchCluster,
    namespace: str,
    work: Path,
    processes: Descendants,
    env: dict[str, str] | None = None,
) -> Iterator[MeteredOperator]:
    """An operator on `namespace`, started, and stopped (SIGTERM, then its group) on exit."""
    with pulumi_groups("operator") as groups:
        operator = new_operator(
            cluster.handle.kubeconfig,
            namespace,
            work,
            OPERATOR_ENV if env is None else env,
            pulumi_joins=groups.joins(),
        )
        operator.start()
        try:
            yield MeteredOperator(
                operator, CpuMeter(cluster.supervisor, groups, operator_pid(operator))
            )
        finally:
            processes.note()  # pulumi runs plugins in their own groups: check them afterwards
            operator.stop()


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


def phase(body: dict[str, Any]) -> str:
    """The Proxy's status.phase ('' before the first status write)."""
    return str((body.get("status") or {}).get("phase") or "")


def failed(body: dict[str, Any]) -> RuntimeError:
    """The error for a Proxy that went Failed."""
    provisioned = find_condition(status_of(body).conditions, PROVISIONED)
    message = provisioned.message if provisioned else ""
    return RuntimeError(f"Proxy {body['metadata']['name']} is Failed: {message}")


async def operator_run(
    kube: KubeClient, operator: MeteredOperator, name: str, spec: dict[str, Any]
) -> SingleRun:
    """Time one Proxy from its create call to phase Ready; then delete it, untimed."""
    op = operator.process
    calls_before, cpu_before = len(op.pulumi_invocations()), operator.meter.read()
    started = time.perf_counter()
    await kube.create(proxy_path(op.namespace), managed_proxy(name, **spec))
    provisioned = None
    while True:
        body = await kube.get(proxy_path(op.namespace, name))
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
    cpu = operator.meter.read().since(cpu_before)
    calls = tuple(op.pulumi_invocations()[calls_before:])
    await kube.delete(proxy_path(op.namespace, name))
    await wait_gone(kube, proxy_path(op.namespace, name), timeout=300)
    return SingleRun(seconds, provisioned if provisioned is not None else seconds, cpu, calls)


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


def summed(runs: Sequence[SingleRun]) -> Window:
    """The CPU of several runs together."""
    return reduce(Window.__add__, (run.cpu for run in runs))


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
