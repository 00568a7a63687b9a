"""The health engine in the running operator: Ready, Unhealthy when squid stops, Ready again."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from datetime import datetime, timedelta

import pytest

from egress_proxies.kube import JsonObject, KubeClient
from harness.cluster import container_pid
from harness.operator import OperatorProcess, managed_proxy, proxy_path, wait_for_condition
from harness.origins import serve_origin

pytestmark = pytest.mark.e2e

QUIET_SECONDS = 40  # < MIN_REPORT_INTERVAL_SECONDS: no write is due in it


async def squid_pid(kube: KubeClient, namespace: str) -> int:
    pods = await kube.get(f"/api/v1/namespaces/{namespace}/pods")
    [pod] = pods["items"]
    return container_pid(pod["status"]["containerStatuses"][0]["containerID"])


async def writes_during(
    kube: KubeClient, namespace: str, proxy: JsonObject, seconds: int
) -> list[JsonObject]:
    """Every write to `proxy` in the next `seconds`, from a watch at its resource version."""
    name = proxy["metadata"]["name"]
    writes: list[JsonObject] = []
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(seconds):
            async for event in kube.watch(
                proxy_path(namespace),
                resource_version=proxy["metadata"]["resourceVersion"],
                timeout_seconds=seconds + 5,
            ):
                if event["type"] != "BOOKMARK" and event["object"]["metadata"]["name"] == name:
                    writes.append(event["object"])
    return writes


def assert_latency_correction(previous: JsonObject, current: JsonObject) -> None:
    """`current` differs from `previous` only as docs/health.md's latency rule allows."""
    old, new = previous["latencyMillis"], current["latencyMillis"]
    assert abs(new - old) > max(20, old * 0.5), f"a steady proxy wrote latency {old} -> {new}"
    checked = [
        datetime.fromisoformat(status["lastHealthCheckTime"]) for status in (previous, current)
    ]
    assert checked[1] - checked[0] >= timedelta(seconds=59), "latency corrected within 60 s"
    unchanged = {"latencyMillis", "lastHealthCheckTime", "conditions"}
    assert {k: v for k, v in current.items() if k not in unchanged} == {
        k: v for k, v in previous.items() if k not in unchanged
    }
    for before, after in zip(previous["conditions"], current["conditions"], strict=True):
        assert {**after, "message": ""} == {**before, "message": ""}


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

        # Watched from the recovery on: a latency correction may follow it, but
        # not within MIN_REPORT_INTERVAL_SECONDS, so this window must see none.
        before = await kube.get(proxy_path(namespace, "watched"))
        hits_before = origin.hits[0]
        started = time.monotonic()
        writes = await writes_during(kube, namespace, before, QUIET_SECONDS)
        assert time.monotonic() - started >= QUIET_SECONDS
        # Steady means no write at all, except the rule's own latency correction
        # (a probe slowed by a busy machine): each one must be justified by it.
        previous = before
        for write in writes:
            assert_latency_correction(previous["status"], write["status"])
            previous = write
        assert previous["status"]["phase"] == "Ready"
        probes_while_quiet = origin.hits[0] - hits_before
        assert probes_while_quiet >= QUIET_SECONDS // 2, probes_while_quiet
