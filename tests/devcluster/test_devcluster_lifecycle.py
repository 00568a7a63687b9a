"""`dev-cluster up --detach` / `down`, and what happens when the supervisor is killed.

Each test runs a dev cluster of its own (real node included), as a user's
`up` would, and checks the host's processes and cgroups afterwards.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from egress_proxies.devcluster import Credentials, KubeApiError, KubeClient, StateLayout
from egress_proxies.devcluster.node import cgroup_dirs, cgroup_name, image_ref
from egress_proxies.devcluster.processes import process_runs
from harness.procfs import all_pids, any_alive, cgroup_pids, cmdline
from tests.conftest import wait_for

pytestmark = pytest.mark.integration

NODE_EXECUTABLES = ("containerd", "containerd-shim-runc-v2", "kubelet", "kube-proxy", "coredns")


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "egress_proxies.cli", "dev-cluster", *args],
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )


def recorded_processes(layout: StateLayout) -> dict[int, str]:
    processes = {}
    for pid_file in layout.pids.glob("*.pid"):
        pid, executable = pid_file.read_text().split()[:2]
        processes[int(pid)] = executable
    return processes


def sleeper_pod(name: str) -> dict[str, Any]:
    """A pod of the local squid image that only sleeps."""
    return {
        "metadata": {"name": name},
        "spec": {
            "containers": [
                {"name": "main", "image": image_ref("squid"), "command": ["/bin/sleep", "3600"]}
            ],
            "terminationGracePeriodSeconds": 1,
        },
    }


async def start_sleeper(layout: StateLayout, name: str) -> None:
    async with KubeClient(Credentials.from_kubeconfig(layout.kubeconfig)) as kube:

        async def default_account() -> bool:
            try:
                await kube.get("/api/v1/namespaces/default/serviceaccounts/default")
            except KubeApiError:
                return False
            return True

        await wait_for(default_account, timeout=30)
        await kube.create("/api/v1/namespaces/default/pods", sleeper_pod(name))

        async def running() -> bool:
            pod = await kube.get(f"/api/v1/namespaces/default/pods/{name}")
            return bool(pod.get("status", {}).get("phase") == "Running")

        await wait_for(running, timeout=90, interval=0.3)


def node_processes_of(state: Path) -> list[int]:
    """Node processes still running whose command line names this state dir."""
    return [
        pid
        for pid in all_pids()
        for executable in NODE_EXECUTABLES
        if process_runs(pid, executable) and str(state) in cmdline(pid)
    ]


@pytest.fixture
def state_dir(tmp_path: Path) -> Iterator[Path]:
    yield tmp_path / "cluster"
    cli("down", "--state-dir", str(tmp_path / "cluster"))


async def test_detached_cluster_serves_until_down_and_leaves_nothing(state_dir: Path) -> None:
    started = cli("up", "--state-dir", str(state_dir), "--detach")
    assert started.returncode == 0, started.stderr
    assert "ready: export KUBECONFIG=" in started.stderr
    layout = StateLayout(state_dir)
    async with KubeClient(Credentials.from_kubeconfig(layout.kubeconfig)) as kube:
        version = await kube.get("/version")
        assert version["gitVersion"] == "v1.36.3"
    await start_sleeper(layout, "lifecycle")
    processes = recorded_processes(layout)
    assert {"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler"} <= set(
        processes.values()
    )
    cgroups = cgroup_dirs(cgroup_name(layout.root))
    in_pods = cgroup_pids(cgroups)
    assert in_pods, "the running pod has no process in the node's cgroups"
    assert node_processes_of(state_dir)

    again = cli("up", "--state-dir", str(state_dir), "--detach")
    assert again.returncode == 0 and "already running" in again.stderr

    stopped = cli("down", "--state-dir", str(state_dir))
    assert stopped.returncode == 0, stopped.stderr
    assert not [pid for pid, exe in processes.items() if process_runs(pid, exe)]
    assert not any_alive(in_pods)
    assert not node_processes_of(state_dir)
    assert not list(layout.pids.glob("*.pid"))
    assert not layout.ready.exists()
    assert not [d for d in cgroups if d.exists()]


async def test_a_killed_supervisor_takes_every_process_with_it(state_dir: Path) -> None:
    assert cli("up", "--state-dir", str(state_dir), "--detach").returncode == 0
    layout = StateLayout(state_dir)
    await start_sleeper(layout, "orphan-check")
    processes = recorded_processes(layout)
    cgroups = cgroup_dirs(cgroup_name(layout.root))
    in_pods = cgroup_pids(cgroups)
    assert in_pods
    supervisor = int(layout.supervisor_pid.read_text().split()[0])

    os.kill(supervisor, signal.SIGKILL)

    async def all_gone() -> bool:
        return not (
            any(process_runs(pid, exe) for pid, exe in processes.items())
            or any_alive(in_pods)
            or cgroup_pids(cgroups)
            or node_processes_of(state_dir)
        )

    await wait_for(all_gone, timeout=30, interval=0.2)

    # The next `up` on the same state dir starts cleanly and keeps the cluster's data.
    restarted = cli("up", "--state-dir", str(state_dir), "--detach")
    assert restarted.returncode == 0, restarted.stderr
    async with KubeClient(Credentials.from_kubeconfig(layout.kubeconfig)) as kube:
        pod = await kube.get("/api/v1/namespaces/default/pods/orphan-check")
        assert pod["metadata"]["name"] == "orphan-check"
    started = time.monotonic()
    assert cli("down", "--state-dir", str(state_dir)).returncode == 0
    assert time.monotonic() - started < 60
    assert not [d for d in cgroups if d.exists()]
