"""`dev-cluster up --detach` / `down`, and what happens when the supervisor is killed."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from egress_proxies.devcluster import Credentials, KubeClient, StateLayout
from egress_proxies.devcluster.processes import process_runs
from tests.conftest import wait_for
from tests.integration.test_loopback_kubelet import OPEN_SQUID_CONF, squid_pid, start_squid_pod


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
        assert version["gitVersion"].startswith("v1.")
        pod = await start_squid_pod(kube, "default", "lifecycle", OPEN_SQUID_CONF)
    processes = recorded_processes(layout)
    # A pod without runAsUser starts squid as root, in its own PID namespace (`unshare`).
    assert sorted(set(processes.values())) == [
        "etcd",
        "kube-apiserver",
        "kube-controller-manager",
        "unshare",
    ]
    processes[squid_pid(pod)] = "squid"

    again = cli("up", "--state-dir", str(state_dir), "--detach")
    assert again.returncode == 0 and "already running" in again.stderr

    stopped = cli("down", "--state-dir", str(state_dir))
    assert stopped.returncode == 0, stopped.stderr
    assert not [pid for pid, exe in processes.items() if process_runs(pid, exe)]
    assert not list(layout.pids.glob("*.pid"))
    assert not layout.ready.exists()


async def test_a_killed_supervisor_takes_every_process_with_it(state_dir: Path) -> None:
    assert cli("up", "--state-dir", str(state_dir), "--detach").returncode == 0
    layout = StateLayout(state_dir)
    async with KubeClient(Credentials.from_kubeconfig(layout.kubeconfig)) as kube:
        pod = await start_squid_pod(kube, "default", "orphan-check", OPEN_SQUID_CONF)
    processes = recorded_processes(layout)
    assert "unshare" in processes.values()
    # squid itself dropped to `proxy` (losing its parent-death signal): it must die too.
    processes[squid_pid(pod)] = "squid"
    assert process_runs(squid_pid(pod), "squid")
    supervisor = int(layout.supervisor_pid.read_text().split()[0])

    os.kill(supervisor, signal.SIGKILL)

    async def all_gone() -> bool:
        return not any(process_runs(pid, exe) for pid, exe in processes.items())

    await wait_for(all_gone, timeout=10)

    # The next `up` on the same state dir starts cleanly and keeps the cluster's data.
    restarted = cli("up", "--state-dir", str(state_dir), "--detach")
    assert restarted.returncode == 0, restarted.stderr
    async with KubeClient(Credentials.from_kubeconfig(layout.kubeconfig)) as kube:
        pod = await kube.get("/api/v1/namespaces/default/pods/orphan-check")
        assert pod["metadata"]["name"] == "orphan-check"
    started = time.monotonic()
    assert cli("down", "--state-dir", str(state_dir)).returncode == 0
    assert time.monotonic() - started < 60
