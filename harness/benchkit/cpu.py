"""Who spent the CPU in a benchmark's window: the provisioning processes by kind, the rest apart.

Two readings, one at each end of the window, and nothing sampled between
them, so no process is missed however short its life:

- **A process tree** (the operator's, the dev cluster supervisor's) is the
  sum over its live processes of their own user + system time and of their
  reaped children's (`cutime` + `cstime` in /proc/<pid>/stat). A child that
  exits is waited for by its parent, and the kernel adds its whole time, its
  own reaped children's included, to the parent's: the difference of two
  readings is what the tree spent between them, processes that started and
  ended in between included. `RUSAGE_CHILDREN` is the same count for this
  process alone, and a per-process poller (psutil, /proc) misses what a
  short-lived pulumi or plugin spent after its last sample.
- **pulumi and its kubernetes plugin** run in cgroups of their own
  (`cpuacct`, or cgroup v2's `cpu.stat`): the counting pulumi wrapper and a
  plugin wrapper it puts first on PATH join their group before they exec the
  real binary, and the kernel charges every nanosecond of them, and of what
  they start, to that group. That splits the tree by kind exactly: the
  operator's own time is its /proc stat (it lives through the window), its
  stack worker is the rest of its tree once the two groups are taken out.
- **The dev cluster** (control plane, node, containerd, every pod) is the
  tree of its supervisor; **this process** (the benchmark's polls, probes
  and origin, and the bare Automation API script's program) is its own stat;
  **every other process** on the machine is all processes' time (a sum over
  /proc of own + reaped time) minus the named ones.
- **The machine**: busy time from /proc/stat (user, nice, system, irq,
  softirq, steal) over all cores.

A process that outlives its parent leaves the tree it was counted in (pulumi
stops its plugins before it exits; the node's shims stay below its init).
"""

from __future__ import annotations

import contextlib
import os
import secrets
import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

PULUMI = "pulumi"
KUBERNETES_PLUGIN = "pulumi-resource-kubernetes"
_TICKS = os.sysconf("SC_CLK_TCK")
_CGROUPS = Path("/sys/fs/cgroup")

# The kinds a provisioning side's CPU is split into, in report order.
OPERATOR, WORKER, CLI, PLUGIN = "operator", "stack worker", "pulumi CLI", "kubernetes plugin"
BARE = "bench process (the bare script)"
CLUSTER, BENCH, OTHERS = "dev cluster", "bench process", "other processes"
PROVISIONING = (OPERATOR, WORKER, BARE, CLI, PLUGIN)  # one side's kinds


class CpuAccountingError(RuntimeError):
    """The machine offers no cgroup this benchmark can create (it needs root)."""


@dataclass(frozen=True)
class ProcessTimes:
    """One live process: its parent, its own CPU seconds and its reaped children's."""

    ppid: int
    own: float
    reaped: float


def process_table() -> dict[int, ProcessTimes]:
    """Every process on the machine, from /proc (threads are inside their process's times)."""
    table = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue  # it exited while we looked
        ticks = [int(field) for field in fields[11:15]]
        table[int(stat.parent.name)] = ProcessTimes(
            int(fields[1]), (ticks[0] + ticks[1]) / _TICKS, (ticks[2] + ticks[3]) / _TICKS
        )
    return table


def tree(table: Mapping[int, ProcessTimes], root: int) -> list[int]:
    """`root` and every live process below it."""
    children: dict[int, list[int]] = {}
    for pid, times in table.items():
        children.setdefault(times.ppid, []).append(pid)
    found, queue = [], [root] if root in table else []
    while queue:
        pid = queue.pop()
        found.append(pid)
        queue.extend(children.get(pid, []))
    return found


def total(table: Mapping[int, ProcessTimes], pids: Iterable[int]) -> float:
    """Own + reaped seconds of these processes: everything they and their dead children spent."""
    return sum(table[pid].own + table[pid].reaped for pid in pids)


def machine_seconds() -> tuple[float, float]:
    """The machine's busy and elapsed CPU seconds since boot, all cores, from /proc/stat."""
    fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]
    user, nice, system, idle, iowait, irq, softirq, steal = (int(f) for f in fields)
    busy = user + nice + system + irq + softirq + steal
    return busy / _TICKS, (busy + idle + iowait) / _TICKS


class CpuGroup:
    """A cgroup that only counts CPU: whatever joins it, and what that starts, is charged to it."""

    def __init__(self, path: Path, usage: Path, scale: float) -> None:
        self.path = path
        self._usage = usage
        self._scale = scale

    def __repr__(self) -> str:
        return f"<CpuGroup {self.path} {self.seconds():.2f} s>"

    @classmethod
    def create(cls, name: str) -> CpuGroup:
        """A new group in cgroup v1's cpuacct hierarchy, else in the v2 hierarchy."""
        for hierarchy, usage, scale in (
            (_CGROUPS / "cpuacct", "cpuacct.usage", 1e-9),
            (_CGROUPS, "cpu.stat", 1e-6),
        ):
            if (hierarchy / usage).exists():
                path = hierarchy / name
                try:
                    path.mkdir()
                except OSError as error:
                    raise CpuAccountingError(f"cannot create cgroup {path}: {error}") from None
                return cls(path, path / usage, scale)
        raise CpuAccountingError(f"no cpuacct or cgroup v2 hierarchy under {_CGROUPS}")

    @property
    def procs(self) -> Path:
        """The file a process writes its pid into to join."""
        return self.path / "cgroup.procs"

    def seconds(self) -> float:
        """CPU seconds charged to the group so far."""
        text = self._usage.read_text()
        if self._usage.name == "cpu.stat":
            text = dict(line.split() for line in text.splitlines())["usage_usec"]
        return int(text) * self._scale

    def remove(self, timeout: float = 10.0) -> None:
        """Remove the group once its processes are gone (a plugin may take a moment to exit)."""
        deadline = time.monotonic() + timeout
        while self.path.exists():
            try:
                self.path.rmdir()
            except OSError:
                if time.monotonic() > deadline:
                    return  # still busy: left behind, empty once its processes exit
                time.sleep(0.1)


@dataclass(frozen=True)
class PulumiGroups:
    """The cgroups one side's pulumi CLI and kubernetes plugin run in."""

    cli: CpuGroup
    plugin: CpuGroup

    def joins(self) -> dict[str, Path]:
        """For the counting pulumi wrapper: each wrapped binary and the cgroup it joins."""
        return {PULUMI: self.cli.procs, KUBERNETES_PLUGIN: self.plugin.procs}


@dataclass(frozen=True)
class Reading:
    """Cumulative CPU seconds by kind, and the machine's busy and elapsed seconds."""

    seconds: dict[str, float]
    machine_busy: float
    machine_total: float

    def since(self, earlier: Reading) -> Window:
        """What was spent between `earlier` and this reading."""
        return Window(
            {kind: value - earlier.seconds.get(kind, 0.0) for kind, value in self.seconds.items()},
            self.machine_busy - earlier.machine_busy,
            self.machine_total - earlier.machine_total,
        )


@dataclass(frozen=True)
class Window:
    """CPU seconds spent in one window, by kind, beside the machine's."""

    seconds: dict[str, float]
    machine_busy: float
    machine_total: float

    def __add__(self, other: Window) -> Window:
        kinds = [*self.seconds, *(kind for kind in other.seconds if kind not in self.seconds)]
        return Window(
            {kind: self.seconds.get(kind, 0.0) + other.seconds.get(kind, 0.0) for kind in kinds},
            self.machine_busy + other.machine_busy,
            self.machine_total + other.machine_total,
        )

    @property
    def fraction(self) -> float:
        """How busy the machine was: busy ÷ elapsed, all cores."""
        return self.machine_busy / self.machine_total if self.machine_total else 0.0

    @property
    def named(self) -> float:
        """Every kind but the other processes on the machine."""
        return sum(value for kind, value in self.seconds.items() if kind != OTHERS)

    def provisioning(self) -> float:
        """The side's own kinds: operator, worker, pulumi CLI, plugin (or the bare script's)."""
        return sum(self.seconds.get(kind, 0.0) for kind in PROVISIONING)

    def lines(self, per: int, noun: str = "Proxy") -> list[str]:
        """The report: seconds per `noun` by kind, then the sums against the machine."""
        kinds = ", ".join(
            f"{kind} {value / per:.2f}" for kind, value in self.seconds.items() if kind != OTHERS
        )
        busy = self.machine_busy
        everything = self.named + self.seconds.get(OTHERS, 0.0)
        return [
            f"CPU s per {noun}, by process: {kinds}",
            f"  provisioning ({', '.join(k for k in self.seconds if k in PROVISIONING)}): "
            f"{self.provisioning() / per:.2f} CPU s per {noun}",
            f"  sum of those processes {self.named:.1f} s vs machine busy {busy:.1f} s "
            f"(/proc/stat, {self.machine_total:.1f} s elapsed on all cores): "
            f"{_share(self.named, busy)}; every other process on the machine "
            f"{self.seconds.get(OTHERS, 0.0):.1f} s, all processes {_share(everything, busy)}",
        ]


def _share(part: float, whole: float) -> str:
    return f"{part / whole:.0%} of it" if whole else "n/a"


class CpuMeter:
    """Readings of one provisioning side (an operator, or this process's bare script).

    `cluster` is the dev cluster supervisor's pid.
    """

    def __init__(self, cluster: int, groups: PulumiGroups, operator: int | None = None) -> None:
        self._cluster = cluster
        self._groups = groups
        self._operator = operator

    def read(self) -> Reading:
        """Cumulative seconds of every kind now."""
        busy, elapsed = machine_seconds()
        table = process_table()
        me = os.getpid()
        cli, plugin = self._groups.cli.seconds(), self._groups.plugin.seconds()
        cluster = total(table, tree(table, self._cluster))
        bench = table[me].own
        seconds: dict[str, float]
        if self._operator is None:
            seconds = {BARE: bench, CLI: cli, PLUGIN: plugin}
            named = bench + cli + plugin + cluster
        else:
            own = table[self._operator].own
            family = total(table, tree(table, self._operator))
            seconds = {OPERATOR: own, WORKER: family - own - cli - plugin, CLI: cli, PLUGIN: plugin}
            seconds[BENCH] = bench
            named = family + cluster + bench
        everything = sum(times.own + times.reaped for times in table.values())
        seconds |= {CLUSTER: cluster, OTHERS: everything - named}
        return Reading(seconds, busy, elapsed)


@contextlib.contextmanager
def pulumi_groups(label: str) -> Iterator[PulumiGroups]:
    """A pair of fresh groups for one side's pulumi CLI and plugin, removed afterwards."""
    stem = f"bench-{os.getpid()}-{label}-{secrets.token_hex(2)}"
    cli = CpuGroup.create(f"{stem}-cli")
    try:
        plugin = CpuGroup.create(f"{stem}-plugin")
        try:
            yield PulumiGroups(cli, plugin)
        finally:
            plugin.remove()
    finally:
        cli.remove()
