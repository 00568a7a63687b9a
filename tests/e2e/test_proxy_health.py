"""The health engine in the running operator: Ready, Unhealthy when squid stops, Ready again."""

from __future__ import annotations

import asyncio
import os
import signal
import time

from egress_proxies.kube import KubeClient
from harness.origins import serve_origin
from tests.e2e.conftest import OperatorProcess, managed_proxy, proxy_path, wait_for_condition

QUIET_SECONDS = 120


async def squid_pid(kube: KubeClient, namespace: str) -> int:
    pods = await kube.get(f"/api/v1/namespaces/{namespace}/pods")
    [pod] = pods["items"]
    container_id: str = pod["status"]["containerStatuses"][0]["containerID"]
    return int(container_id.removeprefix("loopback://"))


async def test_stopped_squid_goes_unhealthy_and_comes_back_ready_and_steady_is_quiet(
    kube: KubeClient, namespace: str, operator: OperatorProcess
) -> None:
    async with serve_origin() as origin:
        health = {
            "url": origin.url,
            "expectedStatus": 200,
            "expectBody": "hello",
            "intervalSeconds": 1,
            "timeoutSeconds": 1,
            "successThreshold": 1,
            "failureThreshold": 2,
        }
        await kube.create(proxy_path(namespace), managed_proxy("watched", healthCheck=health))
        body = await wait_for_condition(kube, namespace, "watched", "Healthy", "True")
        assert body["status"]["phase"] == "Ready"
        assert body["status"]["latencyMillis"] >= 0

        pid = await squid_pid(kube, namespace)
        os.kill(pid, signal.SIGSTOP)
        try:
            body = await wait_for_condition(kube, namespace, "watched", "Healthy", "False")
            assert body["status"]["phase"] == "Unhealthy"
        finally:
            os.kill(pid, signal.SIGCONT)
        body = await wait_for_condition(kube, namespace, "watched", "Healthy", "True")
        assert body["status"]["phase"] == "Ready"

        # Let the latency settle (one rate-limited correction may follow a recovery).
        await asyncio.sleep(65)
        before = await kube.get(proxy_path(namespace, "watched"))
        hits_before = origin.hits[0]
        started = time.monotonic()
        await asyncio.sleep(QUIET_SECONDS)
        after = await kube.get(proxy_path(namespace, "watched"))
        assert time.monotonic() - started >= QUIET_SECONDS
        assert after["status"] == before["status"]
        assert after["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"], (
            "a steadily healthy proxy caused a write"
        )
        assert after["status"]["phase"] == "Ready"
        probes_while_quiet = origin.hits[0] - hits_before
        assert probes_while_quiet >= QUIET_SECONDS // 2, probes_while_quiet
