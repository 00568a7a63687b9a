"""deploy/'s optional overlays on a dev cluster: two operator shards, and the scaled-out tier.

The module runs a dev cluster of its own (the overlays install cluster-wide
operators, which the session's operator tests must not meet). Each test
applies its overlay as a user would (`kubectl apply -k`), with only the dev
cluster's images swapped in, and uninstalls it afterwards (the operators
first, then its Proxies without finalizing them). Claims bind through the
dev cluster's default StorageClass, as on kind.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from egress_proxies.kube import KubeClient
from egress_proxies.stacks.backends import FileBackend
from egress_proxies.stacks.naming import PROJECT
from harness.cluster import ClusterHandle, wait_for
from harness.deploy import NAMESPACE, REPO, Deployed, deploy, kubectl, write_dev_overlay
from harness.operator import managed_proxy, proxy_path
from harness.origins import serve_origin
from tests.conftest import RESTRICTED, create_namespace, supervised_cluster

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def own_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClusterHandle]:
    with supervised_cluster(tmp_path_factory) as handle:
        yield handle


@dataclass
class Install:
    """One test's install of an overlay, and the namespaces its Proxies live in."""

    cluster: ClusterHandle
    directory: Path
    namespaces: list[str] = field(default_factory=list)

    def apply(self, overlay: str) -> Deployed:
        """deploy/OVERLAY with the dev cluster's images, until every Deployment is Available."""
        written = write_dev_overlay(self.directory / "overlay", REPO / "deploy" / overlay)
        return deploy(self.cluster.kubeconfig, written)

    def uninstall(self) -> None:
        """Stop the operators, then drop the test's Proxies without their finalizers.

        Finalizing each Proxy (a pulumi destroy) is what other tests check; here it
        would only add minutes. The next install needs the operators' namespace gone.
        """
        config = self.cluster.kubeconfig
        kubectl(config, "delete", "namespace", NAMESPACE, "--wait=false", "--ignore-not-found")
        kubectl(config, "-n", NAMESPACE, "delete", "pods", "--all", "--grace-period=0", "--force")
        for namespace in self.namespaces:
            for proxy in kubectl(config, "-n", namespace, "get", "proxies", "-o", "name").split():
                kubectl(
                    config,
                    "-n",
                    namespace,
                    "patch",
                    proxy,
                    "--type=merge",
                    "-p",
                    '{"metadata":{"finalizers":null}}',
                )
            kubectl(config, "delete", "namespace", namespace, "--wait=false")
        kubectl(config, "wait", "--for=delete", f"namespace/{NAMESPACE}", "--timeout=300s")


@pytest.fixture
def install(own_cluster: ClusterHandle, tmp_path: Path) -> Iterator[Install]:
    installed = Install(own_cluster, tmp_path)
    yield installed
    installed.uninstall()


def claimed_directory(deployed: Deployed, claim: str) -> Path:
    """The host directory behind a claim of the `standard` class."""
    volume = deployed.kubectl(
        "-n", NAMESPACE, "get", "pvc", claim, "-o", "jsonpath={.spec.volumeName}"
    ).strip()
    path = deployed.kubectl("get", "pv", volume, "-o", "jsonpath={.spec.hostPath.path}")
    return Path(path.strip())


async def wait_ready(kube: KubeClient, namespace: str, name: str) -> dict[str, Any]:
    async def ready() -> dict[str, Any] | None:
        body = await kube.get(proxy_path(namespace, name))
        return body if (body.get("status") or {}).get("phase") == "Ready" else None

    return await wait_for(ready, timeout=300, interval=0.5)


async def test_each_shard_provisions_only_its_own_proxies(
    own_cluster: ClusterHandle, install: Install, request: pytest.FixtureRequest
) -> None:
    deployed = install.apply("shards")
    print(deployed.kubectl("-n", NAMESPACE, "get", "deployments,pods,pvc", "-o", "wide"))
    async with KubeClient(own_cluster.credentials) as kube:
        namespace = await create_namespace(kube, request, RESTRICTED)
        install.namespaces.append(namespace)
        async with serve_origin(host=own_cluster.host_address) as origin:
            health = {
                "url": origin.url,
                "expectedStatus": 200,
                "intervalSeconds": 2,
                "timeoutSeconds": 1,
            }
            for shard in ("a", "b"):
                body = managed_proxy(f"in-{shard}", healthCheck=health)
                body["metadata"]["labels"] = {"shard": shard}
                await kube.create(proxy_path(namespace), body)
            for shard in ("a", "b"):
                await wait_ready(kube, namespace, f"in-{shard}")
    stacks = {
        shard: FileBackend(claimed_directory(deployed, claim) / "backend", PROJECT).stacks()
        for shard, claim in (("a", "egress-proxies-state"), ("b", "egress-proxies-state-shard-b"))
    }
    print("stacks per shard:", stacks)
    assert stacks == {"a": [f"{namespace}.in-a"], "b": [f"{namespace}.in-b"]}


async def test_leases_in_the_scaled_out_tier_survive_its_rollout_restart(
    own_cluster: ClusterHandle, install: Install, request: pytest.FixtureRequest
) -> None:
    deployed = install.apply("scale-out")
    print(deployed.kubectl("-n", NAMESPACE, "get", "deployments,pods,svc", "-o", "wide"))
    service = json.loads(
        deployed.kubectl("-n", NAMESPACE, "get", "svc", "egress-proxies-discovery", "-o", "json")
    )
    url = f"http://{service['spec']['clusterIP']}:8090"
    async with KubeClient(own_cluster.credentials) as kube:
        namespace = await create_namespace(kube, request, RESTRICTED)
        install.namespaces.append(namespace)
        async with serve_origin(host=own_cluster.host_address) as origin:
            health = {
                "url": origin.url,
                "expectedStatus": 200,
                "intervalSeconds": 2,
                "timeoutSeconds": 1,
            }
            await kube.create(
                proxy_path(namespace),
                managed_proxy(
                    "tiered", healthCheck=health, attributes={"pool": "tier"}, maxLeases=20
                ),
            )
            await wait_ready(kube, namespace, "tiered")
            async with aiohttp.ClientSession() as session:

                async def first_lease() -> dict[str, Any] | None:
                    async with session.post(
                        f"{url}/v1/leases",
                        json={"selector": {"pool": "tier"}, "ttlSeconds": 300, "target": "t0"},
                        headers={"Authorization": f"Bearer {deployed.token}"},
                    ) as response:
                        if response.status == 409:
                            return None
                        assert response.status == 201, await response.text()
                        grant: dict[str, Any] = await response.json()
                        return grant

                leases = [await wait_for(first_lease, timeout=120, interval=1)]
                for index in range(1, 10):
                    async with session.post(
                        f"{url}/v1/leases",
                        json={
                            "selector": {"pool": "tier"},
                            "ttlSeconds": 300,
                            "target": f"t{index}",
                        },
                        headers={"Authorization": f"Bearer {deployed.token}"},
                    ) as response:
                        assert response.status == 201, await response.text()
                        leases.append(await response.json())
                deployed.kubectl(
                    "-n", NAMESPACE, "rollout", "restart", "deployment/egress-proxies-discovery"
                )
                deployed.kubectl(
                    "-n",
                    NAMESPACE,
                    "rollout",
                    "status",
                    "deployment/egress-proxies-discovery",
                    "--timeout=300s",
                )
                renewed = 0
                # New connections: the keep-alive ones went to the replaced
                # replicas, which close them as they stop (a request racing
                # that close sees "Server disconnected"; the leases are in Redis).
                async with aiohttp.ClientSession() as after:
                    for lease in leases:
                        async with after.post(
                            f"{url}/v1/leases/{lease['leaseId']}/renew",
                            json={"ttlSeconds": 300},
                            headers={"Authorization": f"Bearer {deployed.token}"},
                        ) as response:
                            assert response.status in (200, 404), await response.text()
                            renewed += response.status == 200
                print("leases renewed after the restart:", renewed, "of", len(leases))
                assert renewed == len(leases)
