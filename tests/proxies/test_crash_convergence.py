"""SIGKILL the operator at random points while Proxies are created, replaced and deleted."""

from __future__ import annotations

import asyncio
import random
from typing import Any

import pytest

from egress_proxies.kube import KubeClient
from egress_proxies.vocabulary import UID_LABEL
from harness.operator import RESHAPED, OperatorProcess, managed_proxy, proxy_path
from tests.conftest import wait_for

pytestmark = pytest.mark.e2e

PROXIES = [f"c{index}" for index in range(10)]
REPLACED = PROXIES[:3]
DELETED = PROXIES[3:6]
KILLS = 5
SEED = 20261129

CONVERGENCE_ENV = {
    "EGRESS_PROXIES_GC_INTERVAL_SECONDS": "5",
    "EGRESS_PROXIES_GC_MIN_AGE_SECONDS": "10",
}


async def proxies(kube: KubeClient, namespace: str) -> list[dict[str, Any]]:
    listing = await kube.get(proxy_path(namespace))
    return list(listing["items"])


def settled(body: dict[str, Any]) -> bool:
    status = body.get("status") or {}
    conditions = {c["type"]: c for c in status.get("conditions", [])}
    provisioned = conditions.get("Provisioned")
    return (
        provisioned is not None
        and provisioned["status"] == "True"
        and status.get("observedGeneration") == body["metadata"]["generation"]
    )


@pytest.mark.operator_env(**CONVERGENCE_ENV)
async def test_random_kills_converge_to_one_pod_per_proxy(
    kube: KubeClient, namespace: str, operator: OperatorProcess
) -> None:
    rng = random.Random(SEED)
    kill_times = sorted(rng.uniform(2, 60) for _ in range(KILLS))
    for name in PROXIES:
        await kube.create(proxy_path(namespace), managed_proxy(name))

    async def churn() -> None:
        await asyncio.sleep(15)
        for name in REPLACED:
            await kube.patch(
                proxy_path(namespace, name),
                {"spec": {"kubernetes": RESHAPED}},
            )
        await asyncio.sleep(10)
        for name in DELETED:
            await kube.delete(proxy_path(namespace, name))

    churning = asyncio.create_task(churn())
    elapsed = 0.0
    for at in kill_times:
        await asyncio.sleep(at - elapsed)
        elapsed = at
        operator.kill()
        operator.start()
    await churning

    live = set(PROXIES) - set(DELETED)

    async def converged() -> list[dict[str, Any]] | None:
        bodies = await proxies(kube, namespace)
        names = {body["metadata"]["name"] for body in bodies}
        if names == live and all(settled(body) for body in bodies):
            return bodies
        return None

    bodies = await wait_for(converged, timeout=600, interval=1)
    # One full sweep after convergence, then check every record-keeper agrees.
    log_offset = len(operator.log_text())

    async def swept() -> bool:
        return "GC sweep finished" in operator.log_text()[log_offset:]

    await wait_for(swept, timeout=60)
    uids = {body["metadata"]["uid"]: body for body in bodies}
    pods = (await kube.get(f"/api/v1/namespaces/{namespace}/pods"))["items"]
    running = [pod for pod in pods if not pod["metadata"].get("deletionTimestamp")]
    owners = sorted(pod["metadata"]["labels"].get(UID_LABEL, "") for pod in running)
    assert owners == sorted(uids), "exactly one pod per live Proxy and no orphan pod"
    for pod in running:
        body = uids[pod["metadata"]["labels"][UID_LABEL]]
        assert pod["status"]["podIP"] == body["status"]["ip"]
    stacks = sorted(
        path.stem
        for path in (operator.state_dir / "backend" / ".pulumi" / "stacks").rglob("*.json")
    )
    assert stacks == sorted(f"{namespace}.{name}" for name in live)
    locks = list((operator.state_dir / "backend" / ".pulumi" / "locks").rglob("*.json"))
    assert locks == []
