"""An object left by an interrupted `up` (unknown to the checkpoint) is taken over, not fought."""

from __future__ import annotations

import secrets
from pathlib import Path

import pulumi
import pulumi_kubernetes as k8s
import pytest

from egress_proxies import toolchain
from egress_proxies.devcluster import KubeClient
from egress_proxies.stacks.runner import RunnerSettings, StackRunner
from tests.conftest import ClusterHandle

pytestmark = pytest.mark.integration

APPLY_PATCH = "application/apply-patch+yaml"


async def test_up_takes_over_fields_another_manager_applied(
    kube: KubeClient, namespace: str, dev_cluster: ClusterHandle, tmp_path: Path
) -> None:
    path = f"/api/v1/namespaces/{namespace}/configmaps/left-behind"
    # What a killed run leaves: the object exists, applied under that run's manager.
    await kube.request(
        "PATCH",
        path,
        body={
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "left-behind", "namespace": namespace},
            "data": {"image": "old"},
        },
        params={"fieldManager": "pulumi-kubernetes-killed-run"},
        content_type=APPLY_PATCH,
    )

    def program() -> None:
        config_map = k8s.core.v1.ConfigMap(
            "left-behind",
            metadata={"name": "left-behind", "namespace": namespace},
            data={"image": "new"},
        )
        pulumi.export("name", config_map.metadata["name"])

    state_dir = tmp_path / "state"
    runner = StackRunner(
        RunnerSettings(
            state_dir=state_dir,
            passphrase=secrets.token_urlsafe(16),
            pulumi_root=toolchain.cache_dir(),
            extra_env={
                "KUBECONFIG": str(dev_cluster.kubeconfig),
                "PATH": str(toolchain.bin_dir()),
            },
        )
    )
    try:
        outputs = await runner.up(f"{namespace}.adoption", "uid-1", program)
        assert outputs["name"] == "left-behind"
        assert (await kube.get(path))["data"] == {"image": "new"}
        await runner.destroy(f"{namespace}.adoption")
    finally:
        await runner.close()
