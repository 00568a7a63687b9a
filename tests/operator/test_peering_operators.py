"""Two operators on one namespace: kopf peering leaves one at work, and only that one sweeps."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from egress_proxies.kube import KubeClient
from egress_proxies.operator.state_dir import StateDirClaim
from egress_proxies.vocabulary import UID_LABEL
from harness.operator import (
    OperatorProcess,
    managed_proxy,
    new_operator,
    proxy_path,
    wait_for_condition,
    wait_gone,
)
from tests.conftest import ClusterHandle, wait_for
from tests.gc.test_orphan_gc import pod_names, stray_pod

pytestmark = pytest.mark.e2e


def peer_operator(
    dev_cluster: ClusterHandle,
    namespace: str,
    directory: Path,
    shared: dict[str, str],
    priority: int,
) -> OperatorProcess:
    directory.mkdir()
    return new_operator(
        dev_cluster.kubeconfig,
        namespace,
        directory,
        {**shared, "EGRESS_PROXIES_PEERING_PRIORITY": str(priority)},
    )


def identity(operator: OperatorProcess) -> str:
    found = re.search(r"peering 'egress-proxies' as (\S+)", operator.log_text())
    assert found, operator.log_text()
    return found.group(1)


async def logged(operator: OperatorProcess, text: str, timeout: float = 60) -> None:
    async def present() -> bool:
        return text in operator.log_text()

    await wait_for(present, timeout=timeout)


async def test_the_higher_priority_operator_works_and_sweeps_the_other_takes_over(
    kube: KubeClient, dev_cluster: ClusterHandle, namespace: str, tmp_path: Path
) -> None:
    shared = {
        "EGRESS_PROXIES_GC_INTERVAL_SECONDS": "2",
        "EGRESS_PROXIES_GC_MIN_AGE_SECONDS": "1",
    }
    leader = peer_operator(dev_cluster, namespace, tmp_path / "leader", shared, priority=10)
    standby = peer_operator(dev_cluster, namespace, tmp_path / "standby", shared, priority=0)
    leader.start()
    standby.start()
    pods = f"/api/v1/namespaces/{namespace}/pods"
    try:
        # A peering operator starts paused; kopf lets the leader resume at once.
        await logged(leader, "Resuming operations after the pause")
        await logged(standby, f"GC sweep not run: {identity(leader)} has a higher priority")

        await kube.create(proxy_path(namespace), managed_proxy("shared"))
        await wait_for_condition(kube, namespace, "shared", "Provisioned", "True")
        await kube.create(pods, stray_pod("orphan-while-both-run", {UID_LABEL: "gone-1"}))
        await wait_for(
            lambda: _absent(kube, namespace, "orphan-while-both-run"), timeout=60, interval=0.5
        )
        assert "pods/" + namespace + "/orphan-while-both-run" in leader.log_text()
        assert "GC deleting" not in standby.log_text()
        assert "GC sweep finished" not in standby.log_text()
        assert not [call for call in standby.pulumi_invocations() if "up" in call.split()]
        # Each operator has its own state dir, so the leader deletes what it made.
        await kube.delete(proxy_path(namespace, "shared"))
        await wait_gone(kube, proxy_path(namespace, "shared"))

        leader.stop()
        await logged(standby, "Resuming operations after the pause")
        await kube.create(pods, stray_pod("orphan-after-failover", {UID_LABEL: "gone-2"}))
        await wait_for(
            lambda: _absent(kube, namespace, "orphan-after-failover"), timeout=60, interval=0.5
        )
        assert "pods/" + namespace + "/orphan-after-failover" in standby.log_text()

        # The standby's handlers run now: it provisions and deletes.
        await kube.create(proxy_path(namespace), managed_proxy("after-failover"))
        await wait_for_condition(kube, namespace, "after-failover", "Provisioned", "True")
        await kube.delete(proxy_path(namespace, "after-failover"))
        await wait_gone(kube, proxy_path(namespace, "after-failover"))
        calls = [call.split() for call in standby.pulumi_invocations()]
        assert any("up" in call for call in calls)
        assert any("destroy" in call for call in calls)
    finally:
        leader.stop()
        standby.stop()


async def _absent(kube: KubeClient, namespace: str, name: str) -> bool:
    return name not in await pod_names(kube, namespace)


def test_a_second_operator_on_a_held_state_dir_refuses_to_start(
    dev_cluster: ClusterHandle, namespace: str, tmp_path: Path
) -> None:
    held = StateDirClaim.acquire(tmp_path / "state")
    try:
        done = subprocess.run(
            [sys.executable, "-m", "egress_proxies.cli", "run", "--namespace", namespace],
            env={
                **os.environ,
                "KUBECONFIG": str(dev_cluster.kubeconfig),
                "EGRESS_PROXIES_STATE_DIR": str(tmp_path / "state"),
                "PULUMI_CONFIG_PASSPHRASE": "unused",
            },
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
    finally:
        held.release()
    assert done.returncode == 2, done.stderr
    assert f"another operator (pid {os.getpid()}) is using the state dir" in done.stderr
