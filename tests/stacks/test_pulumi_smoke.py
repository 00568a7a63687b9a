"""Smoke test: the real pulumi CLI and kubernetes plugin drive the dev cluster."""

from __future__ import annotations

import asyncio
import json
import subprocess

import pulumi
import pulumi_kubernetes as k8s
import pytest
from pulumi import automation as auto

from egress_proxies import toolchain
from egress_proxies.devcluster import KubeClient
from tests.conftest import ClusterHandle, PulumiBackend

pytestmark = pytest.mark.integration

PROJECT = "smoke"


async def test_inline_program_creates_and_destroys_a_configmap(
    kube: KubeClient, namespace: str, pulumi_backend: PulumiBackend, dev_cluster: ClusterHandle
) -> None:
    kubeconfig = dev_cluster.kubeconfig.read_text()

    def program() -> None:
        provider = k8s.Provider("dev", kubeconfig=kubeconfig)
        config_map = k8s.core.v1.ConfigMap(
            "smoke",
            metadata={"name": "smoke", "namespace": namespace},
            data={"hello": "world"},
            opts=pulumi.ResourceOptions(provider=provider),
        )
        pulumi.export("name", config_map.metadata["name"])

    stack = await asyncio.to_thread(
        auto.create_or_select_stack,
        stack_name=f"{namespace}.smoke",
        project_name=PROJECT,
        program=program,
        opts=auto.LocalWorkspaceOptions(
            env_vars=pulumi_backend.env,
            pulumi_home=str(pulumi_backend.home),
            pulumi_command=auto.PulumiCommand(
                root=str(toolchain.cache_dir()), skip_version_check=True
            ),
            project_settings=auto.ProjectSettings(
                name=PROJECT,
                runtime="python",
                backend=auto.ProjectBackend(url=pulumi_backend.url),
            ),
            secrets_provider="passphrase",
        ),
    )
    result = await asyncio.to_thread(stack.up, on_output=print)
    assert result.summary.result == "succeeded"
    assert result.outputs["name"].value == "smoke"
    created = await kube.get(f"/api/v1/namespaces/{namespace}/configmaps/smoke")
    assert created["data"] == {"hello": "world"}

    listing = await asyncio.to_thread(
        subprocess.run,
        [str(toolchain.find("pulumi")), "stack", "ls", "--all", "--json"],
        env=pulumi_backend.env,
        capture_output=True,
        text=True,
        check=True,
    )
    names = [entry["name"] for entry in json.loads(listing.stdout)]
    assert any(name.endswith(f"{namespace}.smoke") for name in names), names

    await asyncio.to_thread(stack.destroy, on_output=print)
    configmaps = await kube.get(f"/api/v1/namespaces/{namespace}/configmaps")
    assert "smoke" not in [item["metadata"]["name"] for item in configmaps["items"]]

    # Every plugin came from the tool bin dir: nothing was downloaded into PULUMI_HOME.
    plugins = pulumi_backend.home / "plugins"
    assert not plugins.exists() or not any(plugins.iterdir()), list(plugins.iterdir())
    stack.workspace.remove_stack(stack.name)
