"""The Event recorder against a real API server: what it writes is accepted and read by kubectl."""

from __future__ import annotations

import datetime
import subprocess

import pytest

from egress_proxies import toolchain
from egress_proxies.clock import ManualClock
from egress_proxies.events import SERIES_INTERVAL, EventRecorder, Regarding
from egress_proxies.kube import KubeClient
from egress_proxies.model import GROUP, PLURAL, VERSION
from harness.cluster import ClusterHandle
from harness.operator import managed_proxy

pytestmark = pytest.mark.integration


def described_events(kubeconfig: str, namespace: str, name: str) -> list[list[str]]:
    """The rows under "Events:" of `kubectl describe proxy`, split into words."""
    done = subprocess.run(
        [
            str(toolchain.find("kubectl")),
            f"--kubeconfig={kubeconfig}",
            f"--namespace={namespace}",
            "describe",
            "proxy",
            name,
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    lines = done.stdout.split("Events:", 1)[1].splitlines()
    rows = [line.split() for line in lines if line.strip()]
    return rows[2:]  # below the header and its underline


async def test_events_are_accepted_aggregated_and_described_in_order(
    dev_cluster: ClusterHandle, kube: KubeClient, namespace: str
) -> None:
    proxy = await kube.create(
        f"/apis/{GROUP}/{VERSION}/namespaces/{namespace}/{PLURAL}", managed_proxy("p1")
    )
    meta = proxy["metadata"]
    regarding = Regarding(f"{GROUP}/{VERSION}", "Proxy", namespace, "p1", meta["uid"])
    clock = ManualClock(wall=datetime.datetime.now(datetime.UTC))
    events = EventRecorder(
        kube, clock, component=f"{GROUP}/egress-proxies", instance="integration-test"
    )
    for reason, message in [
        ("Provisioning", "provisioning started"),
        ("Provisioned", "serving at 10.0.0.5:3128"),
        ("Healthy", "204 in 3 ms"),
    ]:
        events.record(regarding, "Normal", reason, message)
        clock.advance(0.001)  # within one second: ordered by eventTime's microseconds
    await events.flush()
    for _ in range(3):
        clock.advance(SERIES_INTERVAL)
        events.record(regarding, "Warning", "Unhealthy", "503 from the origin")
        clock.advance(1.0)
        events.record(regarding, "Normal", "Healthy", "204 in 4 ms")
        await events.flush()
    assert events.failed == 0, events

    listing = await kube.request(
        "GET",
        f"/api/v1/namespaces/{namespace}/events",
        params={"fieldSelector": f"involvedObject.uid={meta['uid']}"},
    )
    by_reason = {e["reason"]: e for e in listing["items"]}
    assert sorted(by_reason) == ["Healthy", "Provisioned", "Provisioning", "Unhealthy"]
    assert by_reason["Healthy"]["series"]["count"] == 4
    assert by_reason["Unhealthy"]["series"]["count"] == 3
    assert by_reason["Healthy"]["metadata"]["name"].startswith("p1.")
    assert by_reason["Healthy"]["message"] == "204 in 4 ms"

    rows = described_events(str(dev_cluster.kubeconfig), namespace, "p1")
    print("\n".join(" ".join(row) for row in rows))
    assert [row[1] for row in rows] == ["Provisioning", "Provisioned", "Unhealthy", "Healthy"]
    assert all(row[-1] != "" for row in rows)
    assert "(x4" in " ".join(rows[-1])
