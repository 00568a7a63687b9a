"""Two operator shards on one dev cluster: own Proxies, own backends, own GC, and a move.

Shard a owns the Proxies labelled `shard=a`, shard b those labelled
`shard=b`; both watch one namespace, each with its own state dir (its own
file:// Pulumi backend). The operators and the namespace are shared by the
tests of this module, which run in order.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from egress_proxies import toolchain
from egress_proxies.kube import KubeClient
from egress_proxies.vocabulary import FINALIZER, OWNER_ANNOTATION, SHARD_LABEL, UID_LABEL
from harness.cluster import ClusterHandle
from harness.operator import (
    OperatorProcess,
    managed_proxy,
    new_operator,
    proxy_path,
    wait_for_condition,
    wait_gone,
)
from harness.operator_metrics import gc_sweeps
from harness.origins import serve_origin
from harness.redis import RedisServer
from harness.tier import DiscoveryProcess
from tests.conftest import wait_for
from tests.gc.test_orphan_gc import pod_names, stray_pod

pytestmark = pytest.mark.e2e

FAST_GC = {
    "EGRESS_PROXIES_GC_INTERVAL_SECONDS": "3",
    "EGRESS_PROXIES_GC_MIN_AGE_SECONDS": "15",
}
NAMESPACE = "shards-e2e"


@pytest.fixture(scope="module")
async def shard_kube(dev_cluster: ClusterHandle) -> AsyncIterator[KubeClient]:
    """An admin client for the module's tests."""
    async with KubeClient(dev_cluster.credentials) as client:
        yield client


@pytest.fixture(scope="module")
async def shard_namespace(shard_kube: KubeClient) -> AsyncIterator[str]:
    """One restricted namespace both shards watch."""
    labels = {"pod-security.kubernetes.io/enforce": "restricted"}
    await shard_kube.create(
        "/api/v1/namespaces", {"metadata": {"name": NAMESPACE, "labels": labels}}
    )
    yield NAMESPACE
    await shard_kube.delete(f"/api/v1/namespaces/{NAMESPACE}")


@pytest.fixture(scope="module")
def shards(
    dev_cluster: ClusterHandle, shard_namespace: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, OperatorProcess]]:
    """Operators for shard a and shard b, each with its own state dir."""
    operators = {}
    for name in ("a", "b"):
        process = new_operator(
            dev_cluster.kubeconfig,
            shard_namespace,
            tmp_path_factory.mktemp(f"shard-{name}"),
            FAST_GC,
        )
        process.args = ["--shard-selector", f"shard={name}"]
        process.start()
        operators[name] = process
    yield operators
    for process in operators.values():
        process.stop()


def stack_ls(operator: OperatorProcess, tmp: Path) -> list[str]:
    """`pulumi stack ls --all` against the operator's file:// backend: the stack names."""
    home = tmp / "pulumi-home"
    home.mkdir(exist_ok=True)
    env = {
        "PATH": os.environ["PATH"],
        "PULUMI_BACKEND_URL": f"file://{operator.state_dir.resolve() / 'backend'}",
        "PULUMI_HOME": str(home),
        "PULUMI_SKIP_UPDATE_CHECK": "true",
    }
    result = subprocess.run(
        [toolchain.find("pulumi"), "stack", "ls", "--all", "--json"],
        env=env,
        cwd=tmp,
        capture_output=True,
        text=True,
        check=True,
    )
    return sorted(stack["name"].rsplit("/", 1)[-1] for stack in json.loads(result.stdout))


def labelled(name: str, shard: str | None) -> dict[str, Any]:
    body = managed_proxy(name)
    if shard:
        body["metadata"]["labels"] = {"shard": shard}
    return body


def left_by_an_unsharded_operator(body: dict[str, Any]) -> dict[str, Any]:
    """A Proxy as the operator a fleet was split from left it: with the unsharded finalizer."""
    body["metadata"]["finalizers"] = [FINALIZER]
    return body


async def pods_of(kube: KubeClient, namespace: str, uid: str) -> list[dict[str, Any]]:
    listing = await kube.request(
        "GET",
        f"/api/v1/namespaces/{namespace}/pods",
        params={"labelSelector": f"{UID_LABEL}={uid}"},
    )
    return list(listing["items"])


async def test_each_shard_provisions_only_its_own_proxies(
    shard_kube: KubeClient,
    shard_namespace: str,
    shards: dict[str, OperatorProcess],
    tmp_path: Path,
) -> None:
    kube, ns = shard_kube, shard_namespace
    await kube.create(proxy_path(ns), left_by_an_unsharded_operator(labelled("pa", "a")))
    for name, shard in (("pb", "b"), ("nobodys", None)):
        await kube.create(proxy_path(ns), labelled(name, shard))
    bodies = {
        name: await wait_for_condition(kube, ns, name, "Provisioned", "True", timeout=180)
        for name in ("pa", "pb")
    }

    assert stack_ls(shards["a"], tmp_path) == [f"{ns}.pa"]
    assert stack_ls(shards["b"], tmp_path) == [f"{ns}.pb"]
    for name, shard in (("pa", "a"), ("pb", "b")):
        meta = (await kube.get(proxy_path(ns, name)))["metadata"]
        assert meta["finalizers"] == [f"{FINALIZER}-{shard}"]
        pods = await pods_of(kube, ns, meta["uid"])
        assert [pod["metadata"]["labels"][SHARD_LABEL] for pod in pods] == [shard]
        credentials = await kube.get(
            f"/api/v1/namespaces/{ns}/secrets/{bodies[name]['status']['credentialsSecret']}"
        )
        assert credentials["metadata"]["labels"][SHARD_LABEL] == shard
    # Each shard has its own peering object: neither pauses the other.
    for shard in ("a", "b"):
        await kube.get(f"/apis/kopf.dev/v1/namespaces/{ns}/kopfpeerings/egress-proxies-{shard}")
    nobodys = await kube.get(proxy_path(ns, "nobodys"))
    assert not nobodys["metadata"].get("finalizers")
    # Only the CRD's default status (Ready False, Reconciling True, reason
    # Pending): no operator wrote one.
    status = nobodys.get("status") or {}
    assert set(status) <= {"conditions"}
    assert {c["reason"] for c in status.get("conditions", [])} <= {"Pending"}


async def test_one_discovery_tier_leases_from_both_shards(
    dev_cluster: ClusterHandle,
    own_redis: RedisServer,
    shard_kube: KubeClient,
    shard_namespace: str,
    shards: dict[str, OperatorProcess],
    tmp_path: Path,
) -> None:
    """A separate `egress-proxies discovery` sees both shards' Healthy Proxies and leases each."""
    kube, ns = shard_kube, shard_namespace
    suite = {"suite": "shards-tier"}
    tokens = tmp_path / "tokens"
    tokens.mkdir()
    (tokens / "crawler").write_text("shards-tier-token")
    tier = DiscoveryProcess(
        name="discovery-shards",
        kubeconfig=dev_cluster.kubeconfig,
        lease_store=own_redis.url,
        store_timeout=10.0,
        token_dir=tokens,
        log=tmp_path / "discovery.log",
        pid_dir=tmp_path / "pids",
    )
    # Each shard's health engine probes its own Proxy through squid to this origin.
    async with serve_origin() as origin, aiohttp.ClientSession() as http:
        health = {
            "url": origin.url,
            "expectedStatus": 200,
            "intervalSeconds": 2,
            "timeoutSeconds": 2,
        }
        try:
            for name, shard in (("ta", "a"), ("tb", "b")):
                body = managed_proxy(name, attributes=suite, healthCheck=health)
                body["metadata"]["labels"] = {"shard": shard}
                await kube.create(proxy_path(ns), body)
            for name in ("ta", "tb"):
                await wait_for_condition(kube, ns, name, "Healthy", "True", timeout=180)
            tier.start()
            await tier.ready(timeout=60)
            headers = {"Authorization": "Bearer shards-tier-token"}
            request = {"ttlSeconds": 60, "selector": suite}
            statuses, held = [], []
            # Each Proxy takes one lease (maxLeases 1): two leases are one from each shard.
            for _ in range(3):
                async with http.post(f"{tier.url}/v1/leases", json=request, headers=headers) as r:
                    statuses.append(r.status)
                    if r.status == 201:
                        held.append((await r.json())["proxy"]["name"])
            assert statuses == [201, 201, 409]
            assert sorted(held) == ["ta", "tb"]
        finally:
            tier.stop()
            for name in ("ta", "tb"):
                await kube.delete(proxy_path(ns, name))
            for name in ("ta", "tb"):
                await wait_gone(kube, proxy_path(ns, name), timeout=180)


async def test_neither_shards_gc_touches_the_others(
    shard_kube: KubeClient, shard_namespace: str, shards: dict[str, OperatorProcess]
) -> None:
    kube, ns = shard_kube, shard_namespace
    live_b = {
        pod["metadata"]["name"]: pod["metadata"]["uid"]
        for pod in await pods_of(
            kube, ns, (await kube.get(proxy_path(ns, "pb")))["metadata"]["uid"]
        )
    }
    pods = f"/api/v1/namespaces/{ns}/pods"
    for shard in ("a", "b"):
        labels = {UID_LABEL: f"no-such-proxy-{shard}", SHARD_LABEL: shard}
        await kube.create(pods, stray_pod(f"orphan-{shard}", labels))
    await kube.create(pods, stray_pod("orphan-unsharded", {UID_LABEL: "no-such-proxy-u"}))

    async def both_gone() -> bool:
        names = await pod_names(kube, ns)
        return "orphan-a" not in names and "orphan-b" not in names

    await wait_for(both_gone, timeout=60, interval=0.5)
    for shard, other in (("a", "b"), ("b", "a")):
        log = shards[shard].log_text()
        assert f"id=pods/{ns}/orphan-{shard} " in log
        assert f"orphan-{other}" not in log
        assert "orphan-unsharded" not in log
    # Several sweeps of each shard after the minimum age: b's live pod is untouched.
    counted = {shard: gc_sweeps(process) for shard, process in shards.items()}

    async def two_more_sweeps_each() -> bool:
        return all(gc_sweeps(shards[shard]) >= n + 2 for shard, n in counted.items())

    await wait_for(two_more_sweeps_each, timeout=60, interval=0.5)
    remaining = await pod_names(kube, ns)
    assert "orphan-unsharded" in remaining
    for name, uid in live_b.items():
        assert (await kube.get(f"{pods}/{name}"))["metadata"]["uid"] == uid
    for process in shards.values():
        assert process.log_text().count("GC deleting orphaned instance") == 1
    await kube.delete(f"{pods}/orphan-unsharded")


async def test_a_pod_missing_its_shard_label_is_relabelled_in_place(
    shard_kube: KubeClient, shard_namespace: str, shards: dict[str, OperatorProcess]
) -> None:
    """What an unsharded operator's pods look like to a new shard: its GC asks for one `up`."""
    kube, ns = shard_kube, shard_namespace
    uid = (await kube.get(proxy_path(ns, "pb")))["metadata"]["uid"]
    [pod] = await pods_of(kube, ns, uid)
    path = f"/api/v1/namespaces/{ns}/pods/{pod['metadata']['name']}"
    await kube.patch(path, {"metadata": {"labels": {SHARD_LABEL: None}}})

    async def relabelled() -> bool:
        labels = (await kube.get(path))["metadata"].get("labels") or {}
        return labels.get(SHARD_LABEL) == "b"

    await wait_for(relabelled, timeout=90, interval=0.5)
    assert (await kube.get(path))["metadata"]["uid"] == pod["metadata"]["uid"]
    assert f"GC: the instance of {ns}/pb is gone; re-reconciling" in shards["b"].log_text()
    assert "/pb is gone" not in shards["a"].log_text()


async def test_a_proxy_moves_between_shards_without_a_new_instance(
    shard_kube: KubeClient,
    shard_namespace: str,
    shards: dict[str, OperatorProcess],
    tmp_path: Path,
) -> None:
    kube, ns = shard_kube, shard_namespace
    before = await kube.get(proxy_path(ns, "pa"))
    uid = before["metadata"]["uid"]
    assert before["metadata"]["annotations"][OWNER_ANNOTATION] == "a"
    [pod] = await pods_of(kube, ns, uid)

    await kube.patch(proxy_path(ns, "pa"), {"metadata": {"labels": {"shard": "b"}}})

    async def moved() -> dict[str, Any] | None:
        body = await kube.get(proxy_path(ns, "pa"))
        meta = body["metadata"]
        if meta.get("annotations", {}).get(OWNER_ANNOTATION) != "b":
            return None
        if stack_ls(shards["a"], tmp_path) != [] or meta.get("finalizers") != [f"{FINALIZER}-b"]:
            return None
        # The new owner's first status write can land a moment after its annotation.
        return body if (body.get("status") or {}).get("ip") else None

    after = await wait_for(moved, timeout=120, interval=0.5)
    assert stack_ls(shards["b"], tmp_path) == [f"{ns}.pa", f"{ns}.pb"]
    [same] = await pods_of(kube, ns, uid)
    assert same["metadata"]["uid"] == pod["metadata"]["uid"]  # taken over, not recreated
    assert same["metadata"]["labels"][SHARD_LABEL] == "b"
    assert after["status"].get("ip") == before["status"]["ip"], after["status"]
    assert f"stack {ns}.pa: shard b owns {ns}/pa now; forgetting" in shards["a"].log_text()

    # The new owner's delete handler destroys what the old owner created.
    await kube.delete(proxy_path(ns, "pa"))
    await wait_gone(kube, proxy_path(ns, "pa"))

    # The pod was deleted with the stack; on a real node it ends after squid's shutdown.
    async def pod_gone() -> bool:
        return await pods_of(kube, ns, uid) == []

    await wait_for(pod_gone, timeout=60)
    assert stack_ls(shards["b"], tmp_path) == [f"{ns}.pb"]
    for name in ("pb", "nobodys"):
        await kube.delete(proxy_path(ns, name))
        await wait_gone(kube, proxy_path(ns, name))
    assert stack_ls(shards["b"], tmp_path) == []
