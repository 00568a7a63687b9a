"""A fleet that stays healthy: restricted pods, dead pods replaced, broken ones backed off."""

from __future__ import annotations

import asyncio
import base64
import datetime
import functools
import itertools
import os
import signal
import time
from typing import Any

import pytest

from egress_proxies.kube import KubeApiError, KubeClient
from harness.cluster import container_pid
from harness.operator import (
    OperatorProcess,
    managed_proxy,
    proxy_credentials,
    proxy_path,
    wait_for_condition,
)
from harness.origins import ORIGIN_BODY, serve_origin
from tests.conftest import wait_for

pytestmark = pytest.mark.e2e

BROKEN_IMAGE = "registry.invalid/team/squid-missing:1"


async def connect_through(proxy: tuple[str, int], auth: str, origin: str) -> tuple[str, str]:
    """CONNECT to `origin` (host:port) through the proxy, then GET / in the tunnel."""
    reader, writer = await asyncio.open_connection(*proxy)
    token = base64.b64encode(auth.encode()).decode()
    writer.write(
        f"CONNECT {origin} HTTP/1.1\r\nHost: {origin}\r\n"
        f"Proxy-Authorization: Basic {token}\r\n\r\n".encode()
    )
    status = (await reader.readline()).decode().strip()
    while (await reader.readline()) not in (b"\r\n", b""):
        pass
    writer.write(f"GET / HTTP/1.1\r\nHost: {origin}\r\nConnection: close\r\n\r\n".encode())
    body = (await asyncio.wait_for(reader.read(), 10)).decode(errors="replace")
    writer.close()
    return status, body


async def pod_of(kube: KubeClient, body: dict[str, Any]) -> dict[str, Any]:
    _, namespace, name = body["status"]["instanceId"].split("/")
    return await kube.get(f"/api/v1/namespaces/{namespace}/pods/{name}")


async def proxy_events(kube: KubeClient, namespace: str, name: str) -> list[str]:
    listing = await kube.request(
        "GET",
        f"/api/v1/namespaces/{namespace}/events",
        params={"fieldSelector": f"involvedObject.name={name}"},
    )
    return [event["reason"] for event in listing.get("items", [])]


async def test_a_proxy_in_a_restricted_namespace_is_ready_and_tunnels(
    kube: KubeClient, namespace: str, operator: OperatorProcess
) -> None:
    # Admission is on in this namespace: a root pod with no securityContext is refused.
    with pytest.raises(KubeApiError) as refused:
        await kube.create(
            f"/api/v1/namespaces/{namespace}/pods",
            {
                "metadata": {"name": "rootful"},
                "spec": {"containers": [{"name": "squid", "image": "ubuntu/squid:6.10"}]},
            },
        )
    assert refused.value.status == 403
    assert 'violates PodSecurity "restricted' in str(refused.value)

    await kube.create(proxy_path(namespace), managed_proxy("strict"))
    body = await wait_for_condition(kube, namespace, "strict", "Provisioned", "True")
    pod = await pod_of(kube, body)
    context = pod["spec"]["securityContext"]
    assert (context["runAsUser"], context["runAsGroup"], context["fsGroup"]) == (13, 13, 13)
    assert pod["spec"]["containers"][0]["securityContext"]["readOnlyRootFilesystem"] is True
    auth = await proxy_credentials(kube, namespace, body)
    async with serve_origin() as origin:
        target = origin.url.removeprefix("http://").rstrip("/")
        status, text = await connect_through(
            (body["status"]["ip"], body["status"]["port"]), auth, target
        )
    assert status.startswith("HTTP/1.1 200"), status
    assert ORIGIN_BODY in text


@pytest.mark.operator_env(EGRESS_PROXIES_RETRY_BASE_SECONDS="2")
async def test_a_killed_squid_and_a_deleted_pod_are_replaced_without_the_gc(
    kube: KubeClient, namespace: str, operator: OperatorProcess
) -> None:
    for name in ("killed", "deleted"):
        await kube.create(proxy_path(namespace), managed_proxy(name))
    before = {}
    for name in ("killed", "deleted"):
        body = await wait_for_condition(kube, namespace, name, "Provisioned", "True")
        before[name] = await pod_of(kube, body)

    squid_pid = container_pid(before["killed"]["status"]["containerStatuses"][0]["containerID"])
    os.kill(squid_pid, signal.SIGKILL)
    meta = before["deleted"]["metadata"]
    await kube.delete(f"/api/v1/namespaces/{namespace}/pods/{meta['name']}")
    started = time.monotonic()

    async def replaced(name: str) -> dict[str, Any] | None:
        body = await kube.get(proxy_path(namespace, name))
        condition = {c["type"]: c for c in body["status"].get("conditions", [])}["Provisioned"]
        if condition["status"] != "True":
            return None
        try:
            pod = await pod_of(kube, body)
        except KubeApiError:
            return None
        fresh = pod["metadata"]["uid"] != before[name]["metadata"]["uid"]
        ready = pod["status"].get("phase") == "Running"
        return pod if fresh and ready and pod["status"]["podIP"] == body["status"]["ip"] else None

    for name in ("killed", "deleted"):
        await wait_for(functools.partial(replaced, name), timeout=30, interval=0.25)
    elapsed = time.monotonic() - started
    assert elapsed < 30, elapsed
    print(f"both replaced {elapsed:.1f}s after the kill and the delete")
    for name in ("killed", "deleted"):
        reasons = await wait_for(functools.partial(_recreated, kube, namespace, name))
        assert "InstanceFailed" in reasons, reasons
    # The sweep did not do it: the GC's request annotation was never set.
    body = await kube.get(proxy_path(namespace, "killed"))
    assert "crawl.example.com/reconcile-request" not in body["metadata"].get("annotations", {})


async def _recreated(kube: KubeClient, namespace: str, name: str) -> list[str] | None:
    reasons = await proxy_events(kube, namespace, name)
    return reasons if "Recreating" in reasons else None


@pytest.mark.operator_env(
    EGRESS_PROXIES_INSTANCE_START_TIMEOUT_SECONDS="3", EGRESS_PROXIES_RETRY_BASE_SECONDS="4"
)
async def test_a_pod_that_cannot_start_fails_with_its_cause_and_retries_ever_later(
    kube: KubeClient, namespace: str, operator: OperatorProcess
) -> None:
    await kube.create(
        proxy_path(namespace), managed_proxy("broken", kubernetes={"image": BROKEN_IMAGE})
    )
    failures: dict[int, tuple[str, str]] = {}
    phases: set[str] = set()
    messages: set[str] = set()

    async def four_failures() -> bool:
        status = (await kube.get(proxy_path(namespace, "broken"))).get("status") or {}
        phases.add(status.get("phase", ""))
        for condition in status.get("conditions", []):
            if condition["reason"] == "InstanceFailed":
                messages.add(condition["message"])
        backoff = status.get("backoff") or {}
        if backoff.get("nextRetryTime"):
            failures[backoff["failures"]] = (backoff["lastFailureTime"], backoff["nextRetryTime"])
        return len(failures) >= 4

    await wait_for(four_failures, timeout=150, interval=0.25)
    # Retried by the operator: Provisioning throughout, never Failed (a spec edit's job).
    assert "Provisioning" in phases and "Failed" not in phases
    assert any(BROKEN_IMAGE in m and "ImagePull" in m for m in messages), messages
    times = [tuple(map(_epoch, failures[n])) for n in sorted(failures)][:4]
    print("failures (failure time, retry time):", [failures[n] for n in sorted(failures)])
    scheduled = [retry - failed for failed, retry in times]
    observed = [later[0] - earlier[0] for earlier, later in itertools.pairwise(times)]
    assert scheduled == sorted(scheduled) and scheduled[-1] > 2 * scheduled[0], scheduled
    assert observed[-1] > observed[0], observed


def _epoch(stamp: str) -> float:
    return datetime.datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


async def all_provisioned(kube: KubeClient, namespace: str, names: list[str]) -> bool:
    listing = await kube.get(proxy_path(namespace))
    ready = {
        item["metadata"]["name"]
        for item in listing["items"]
        for condition in (item.get("status") or {}).get("conditions", [])
        if condition["type"] == "Provisioned" and condition["status"] == "True"
    }
    return set(names) <= ready


async def test_pods_that_cannot_start_do_not_hold_up_good_ones(
    kube: KubeClient, namespace: str, operator: OperatorProcess
) -> None:
    """4 Proxies whose image cannot be pulled go first; 12 good ones behind them all come up.

    An `up` that awaited its pod (no pulumi.com/skipAwait) would hold one of
    the 4 pulumi slots for pulumi's 10-minute pod await, so with the broken
    Proxies queued first no good Proxy would be Provisioned within the 300 s
    wait. Nothing here is timed against anything else: the guard is the order
    (every good Proxy Provisioned while the broken ones still are not).
    """
    for i in range(4):
        broken = managed_proxy(f"broken-{i}", kubernetes={"image": BROKEN_IMAGE})
        await kube.create(proxy_path(namespace), broken)
    good = [f"good-{i}" for i in range(12)]
    for name in good:
        await kube.create(proxy_path(namespace), managed_proxy(name))
    await wait_for(
        functools.partial(all_provisioned, kube, namespace, good), timeout=300, interval=0.25
    )

    async def broken_reported() -> bool:
        for i in range(4):
            body = await kube.get(proxy_path(namespace, f"broken-{i}"))
            conditions = {c["type"]: c for c in (body.get("status") or {}).get("conditions", [])}
            provisioned = conditions.get("Provisioned") or {}
            if provisioned.get("status") != "False" or BROKEN_IMAGE not in provisioned.get(
                "message", ""
            ):
                return False
        return True

    await wait_for(broken_reported, timeout=120, interval=0.5)
