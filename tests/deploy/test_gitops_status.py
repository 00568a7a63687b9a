"""What GitOps tools and `kubectl wait` see: Ready, kstatus and lifecycle Events, on the real node.

kstatus comes from `tools/go/kstatus` (sigs.k8s.io/cli-utils, the library
Argo CD, Flux and kpt use); `kubectl wait` and `kubectl describe` are the
real kubectl.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any

import pytest

from egress_proxies import toolchain
from egress_proxies.events import SERIES_INTERVAL
from egress_proxies.kube import JsonObject, KubeClient
from egress_proxies.model import GROUP, VERSION
from egress_proxies.pool_model import POOL_PLURAL
from harness.cluster import ClusterHandle
from harness.kstatus import kstatus_fetched, kstatus_until
from harness.operator import OperatorProcess, managed_proxy, proxy_path, wait_for_condition
from harness.origins import Origin, serve_origin
from tests.conftest import wait_for

pytestmark = pytest.mark.e2e

FLAPS = 50


def health(origin: Origin) -> dict[str, Any]:
    return {
        "url": origin.url,
        "expectedStatus": 200,
        "intervalSeconds": 1,
        "timeoutSeconds": 1,
        "successThreshold": 1,
        "failureThreshold": 1,
    }


async def kubectl(cluster: ClusterHandle, namespace: str, *args: str) -> str:
    process = await asyncio.create_subprocess_exec(
        str(toolchain.find("kubectl")),
        f"--kubeconfig={cluster.kubeconfig}",
        f"--namespace={namespace}",
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await process.communicate()
    assert process.returncode == 0, f"kubectl {' '.join(args)}: {err.decode()}"
    return out.decode()


def event_rows(described: str) -> list[list[str]]:
    """The rows under "Events:" of `kubectl describe`, split into words (Type, Reason, ...)."""
    lines = described.split("Events:", 1)[1].splitlines()
    return [line.split() for line in lines if line.strip()][2:]


async def events_of(kube: KubeClient, namespace: str, uid: str) -> list[JsonObject]:
    listing = await kube.request(
        "GET",
        f"/api/v1/namespaces/{namespace}/events",
        params={"fieldSelector": f"involvedObject.uid={uid}"},
    )
    return list(listing.get("items", []))


def count(event: JsonObject) -> int:
    return int((event.get("series") or {}).get("count") or event.get("count") or 1)


async def test_a_new_proxy_goes_in_progress_to_current_with_its_lifecycle_described(
    kube: KubeClient, namespace: str, operator: OperatorProcess, dev_cluster: ClusterHandle
) -> None:
    async with serve_origin() as origin:
        await kube.create(proxy_path(namespace), managed_proxy("web", healthCheck=health(origin)))
        waiting = asyncio.create_task(
            kubectl(
                dev_cluster,
                namespace,
                "wait",
                "--for=condition=Ready",
                "proxy/web",
                "--timeout=240s",
            )
        )
        seen = await kstatus_until(kube, proxy_path(namespace, "web"), "Current")
        print("kstatus:", seen)
        assert seen[0].status == "InProgress"
        assert "Failed" not in [verdict.status for verdict in seen]
        assert "condition met" in await waiting
        fetched = await kstatus_fetched(
            dev_cluster.kubeconfig, namespace, f"proxies.{VERSION}.{GROUP}/web"
        )
        assert fetched.status == "Current", fetched
        row = (await kubectl(dev_cluster, namespace, "get", "proxy", "web", "--no-headers")).split()
        assert row[1:3] == ["Ready", "True"], row  # Phase, Ready

        async def described() -> list[list[str]] | None:
            rows = event_rows(await kubectl(dev_cluster, namespace, "describe", "proxy", "web"))
            return rows if any(row[1] == "Healthy" for row in rows) else None

        rows = await wait_for(described, timeout=3 * SERIES_INTERVAL, interval=1.0)
        print("\n".join(" ".join(row) for row in rows))
        assert [row[1] for row in rows] == ["Provisioning", "Provisioned", "Healthy"]

        uid = (await kube.get(proxy_path(namespace, "web")))["metadata"]["uid"]
        await kube.delete(proxy_path(namespace, "web"))
        deleting = await wait_for(
            lambda: _reason_seen(kube, namespace, uid, "Deleting"), timeout=60, interval=0.5
        )
        assert deleting["involvedObject"]["name"] == "web"


async def _reason_seen(
    kube: KubeClient, namespace: str, uid: str, reason: str
) -> JsonObject | None:
    return next((e for e in await events_of(kube, namespace, uid) if e["reason"] == reason), None)


async def test_a_permanent_error_is_failed_until_the_spec_is_fixed(
    kube: KubeClient, namespace: str, operator: OperatorProcess, dev_cluster: ClusterHandle
) -> None:
    async with serve_origin() as origin:
        broken = {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "Proxy",
            "metadata": {"name": "broken"},
            "spec": {"provider": "gcp", "healthCheck": health(origin)},  # no spec.gcp block
        }
        await kube.create(proxy_path(namespace), broken)
        failed = await kstatus_until(kube, proxy_path(namespace, "broken"), "Failed")
        print("kstatus:", failed)
        assert "spec.gcp is required" in failed[-1].message
        assert "condition met" in await kubectl(
            dev_cluster,
            namespace,
            "wait",
            "--for=condition=Stalled",
            "proxy/broken",
            "--timeout=60s",
        )

        await kube.patch(
            proxy_path(namespace, "broken"), {"spec": {"provider": "kubernetes", "kubernetes": {}}}
        )
        fixed = await kstatus_until(kube, proxy_path(namespace, "broken"), "Current")
        print("kstatus after the fix:", fixed)
        assert fixed[0].status == "InProgress"
        assert "Failed" not in [verdict.status for verdict in fixed]


def pool_body(name: str, replicas: int, origin: Origin) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "ProxyPool",
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "template": {
                "spec": {
                    "provider": "kubernetes",
                    "kubernetes": {},
                    "attributes": {"pool": name},
                    "healthCheck": health(origin),
                }
            },
        },
    }


async def test_a_pool_through_a_scale_and_a_roll_is_in_progress_then_current(
    kube: KubeClient, namespace: str, operator: OperatorProcess, dev_cluster: ClusterHandle
) -> None:
    pools = f"/apis/{GROUP}/{VERSION}/namespaces/{namespace}/{POOL_PLURAL}"
    async with serve_origin() as origin:
        await kube.create(pools, pool_body("fleet", 2, origin))
        waiting = asyncio.create_task(
            kubectl(
                dev_cluster,
                namespace,
                "wait",
                "--for=condition=Ready",
                "proxypool/fleet",
                "--timeout=300s",
            )
        )
        created = await kstatus_until(kube, f"{pools}/fleet", "Current", timeout=300)
        print("kstatus, created:", created)
        assert created[0].status == "InProgress"
        assert "condition met" in await waiting

        await kubectl(dev_cluster, namespace, "scale", "proxypool/fleet", "--replicas=4")
        scaled = await kstatus_until(kube, f"{pools}/fleet", "Current", timeout=300)
        print("kstatus, scaled 2 -> 4:", scaled)
        assert scaled[0].status == "InProgress"
        status = (await kube.get(f"{pools}/fleet"))["status"]
        assert (status["readyReplicas"], status["updatedReplicas"]) == (4, 4)

        await kube.patch(
            f"{pools}/fleet",
            {"spec": {"template": {"spec": {"attributes": {"pool": "fleet", "rolled": "yes"}}}}},
        )
        rolled = await kstatus_until(kube, f"{pools}/fleet", "Current", timeout=420)
        print("kstatus, template roll:", rolled)
        assert rolled[0].status == "InProgress"
        status = (await kube.get(f"{pools}/fleet"))["status"]
        assert (status["readyReplicas"], status["updatedReplicas"], status["drainingReplicas"]) == (
            4,
            4,
            0,
        )
        fetched = await kstatus_fetched(
            dev_cluster.kubeconfig, namespace, f"{POOL_PLURAL}.{VERSION}.{GROUP}/fleet"
        )
        assert fetched.status == "Current", fetched


async def test_a_proxy_flapping_50_times_makes_a_bounded_number_of_event_objects(
    kube: KubeClient, namespace: str, operator: OperatorProcess
) -> None:
    async with serve_origin() as origin:
        await kube.create(
            proxy_path(namespace), managed_proxy("flappy", healthCheck=health(origin))
        )
        body = await wait_for_condition(kube, namespace, "flappy", "Healthy", "True")
        uid = body["metadata"]["uid"]
        writes: list[str] = []
        watcher = asyncio.create_task(_event_writes(kube, namespace, uid, writes))
        started = time.monotonic()
        try:
            for _ in range(FLAPS):
                origin.fail(True)
                await wait_for_condition(kube, namespace, "flappy", "Healthy", "False")
                origin.fail(False)
                await wait_for_condition(kube, namespace, "flappy", "Healthy", "True")
            flapping = time.monotonic() - started

            async def all_counted() -> list[JsonObject] | None:
                events = await events_of(kube, namespace, uid)
                counts = {e["reason"]: count(e) for e in events}
                done = counts.get("Unhealthy") == FLAPS and counts.get("Healthy") == FLAPS + 1
                return events if done else None

            events = await wait_for(all_counted, timeout=3 * SERIES_INTERVAL, interval=1.0)
        finally:
            watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watcher
    reasons = sorted(e["reason"] for e in events)
    print(
        f"{FLAPS} flaps in {flapping:.0f}s: {len(events)} Event objects {reasons}, "
        f"{len(writes)} Event writes seen"
    )
    assert reasons == ["Healthy", "Provisioned", "Provisioning", "Unhealthy"]
    # At most one write per Event object per SERIES_INTERVAL, plus the first.
    bound = 4 + 2 * (flapping / SERIES_INTERVAL + 2)
    assert len(writes) <= bound, (len(writes), bound)


async def _event_writes(kube: KubeClient, namespace: str, uid: str, writes: list[str]) -> None:
    """Record every Event write (create or update) about the object `uid`."""
    listing = await kube.get(f"/api/v1/namespaces/{namespace}/events")
    version = listing["metadata"]["resourceVersion"]
    while True:
        async for event in kube.watch(
            f"/api/v1/namespaces/{namespace}/events", resource_version=version
        ):
            obj = event["object"]
            if event["type"] not in ("ADDED", "MODIFIED", "BOOKMARK"):
                raise AssertionError(f"the watch of Events ended: {event}")
            version = obj["metadata"].get("resourceVersion", version)
            if event["type"] != "BOOKMARK" and obj["involvedObject"].get("uid") == uid:
                writes.append(obj["reason"])
