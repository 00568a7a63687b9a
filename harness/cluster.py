"""A supervised dev cluster and polling, shared by the tests and the benchmarks."""

from __future__ import annotations

import asyncio
import json
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from egress_proxies.devcluster import Credentials, StateLayout
from egress_proxies.devcluster.processes import Child, spawn

T = TypeVar("T")


@dataclass(frozen=True)
class ClusterHandle:
    """A running dev cluster: where its state lives and how to reach it as admin."""

    layout: StateLayout
    credentials: Credentials
    # Where pods reach the host (an origin for proxies listens there): the
    # host's end of the node's veth.
    host_address: str

    @property
    def kubeconfig(self) -> Path:
        """The admin kubeconfig (for kopf, kubectl and the pulumi kubernetes provider)."""
        return self.layout.kubeconfig


def start_supervised_cluster(state: Path, pid_dir: Path) -> tuple[Child, ClusterHandle]:
    """`dev-cluster up` as a child that dies with this process; returns once it is ready.

    Raises RuntimeError with the supervisor's log tail when it does not start.
    """
    layout = StateLayout(state)
    supervisor = spawn(
        "supervisor",
        [
            sys.executable,
            "-m",
            "egress_proxies.cli",
            "dev-cluster",
            "up",
            "--state-dir",
            str(state),
        ],
        pid_dir=pid_dir,
        log=state / "supervisor.log",
    )
    deadline = time.monotonic() + 300
    while not layout.ready.exists():
        if not supervisor.alive() or time.monotonic() > deadline:
            supervisor.stop()
            raise RuntimeError(f"the dev cluster did not start:\n{supervisor.log_tail(40)}")
        time.sleep(0.2)
    return supervisor, attach_cluster(state)


def attach_cluster(state: Path) -> ClusterHandle:
    """The handle of a dev cluster already running from `state` (e.g. a test session's)."""
    layout = StateLayout(state)
    ready = json.loads(layout.ready.read_text())
    return ClusterHandle(
        layout,
        Credentials.from_kubeconfig(layout.kubeconfig),
        host_address=ready["host_address"],
    )


async def wait_for(
    check: Callable[[], Awaitable[T | None]], timeout: float = 30.0, interval: float = 0.1
) -> T:
    """Poll an async predicate until it returns something truthy; return that value."""
    deadline = time.monotonic() + timeout
    while True:
        result = await check()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout}s")
        await asyncio.sleep(interval)


def container_pid(container_id: str) -> int:
    """The host pid of a container's first process, from its status `containerID`.

    The runtime's id (`containerd://<id>`) is found in the cgroup paths of the
    host's processes: the container's first process is the one whose parent is
    outside the container.
    """
    ident = container_id.partition("://")[2]
    members: set[int] = set()
    for cgroup in Path("/proc").glob("[0-9]*/cgroup"):
        try:
            if ident in cgroup.read_text():
                members.add(int(cgroup.parent.name))
        except OSError:
            continue
    for pid in sorted(members):
        try:
            parent = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        if parent not in members:
            return pid
    raise LookupError(f"no process of container {container_id} on this machine")
