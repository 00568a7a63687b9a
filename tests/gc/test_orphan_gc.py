"""The orphan GC in the running operator, with a short interval and minimum age."""

from __future__ import annotations

import re
from typing import Any

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families

from egress_proxies.kube import KubeClient
from egress_proxies.vocabulary import FINALIZER, UID_LABEL
from harness.operator import (
    OperatorProcess,
    managed_proxy,
    proxy_path,
    wait_for_condition,
    wait_gone,
)
from tests.conftest import PodLister, wait_for

pytestmark = pytest.mark.e2e

FAST_GC = {
    "EGRESS_PROXIES_GC_INTERVAL_SECONDS": "3",
    "EGRESS_PROXIES_GC_MIN_AGE_SECONDS": "20",
}


def stray_pod(name: str, labels: dict[str, str]) -> dict[str, Any]:
    """A pod nobody owns, compliant with the e2e namespaces' "restricted" Pod Security."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "securityContext": {
                "runAsNonRoot": True,
                "runAsUser": 1000,
                "seccompProfile": {"type": "RuntimeDefault"},
            },
            "containers": [
                {
                    "name": "c",
                    "image": "busybox:1.36",
                    "securityContext": {
                        "allowPrivilegeEscalation": False,
                        "capabilities": {"drop": ["ALL"]},
                    },
                }
            ],
        },
    }


def sweeps(operator: OperatorProcess) -> int:
    return len(re.findall(r"GC sweep (finished|skipped)", operator.log_text()))


async def pod_names(kube: KubeClient, namespace: str) -> list[str]:
    listing = await kube.get(f"/api/v1/namespaces/{namespace}/pods")
    return sorted(pod["metadata"]["name"] for pod in listing["items"])


@pytest.mark.operator_env(**FAST_GC)
async def test_only_old_labelled_orphans_are_deleted(
    kube: KubeClient, namespace: str, operator: OperatorProcess
) -> None:
    pods = f"/api/v1/namespaces/{namespace}/pods"
    swept_before = sweeps(operator)
    await kube.create(pods, stray_pod("old-orphan", {UID_LABEL: "no-such-proxy-1"}))
    await kube.create(pods, stray_pod("unlabelled", {"app": "other"}))

    async def old_one_gone() -> bool:
        return "old-orphan" not in await pod_names(kube, namespace)

    # Deleted once older than the minimum age (20 s), by a sweep every 3 s:
    # the sweeps before that one saw it young and kept it.
    await wait_for(old_one_gone, timeout=60)
    assert sweeps(operator) - swept_before >= 2
    await kube.create(pods, stray_pod("young-orphan", {UID_LABEL: "no-such-proxy-2"}))
    seen = sweeps(operator)
    await wait_for(lambda: _at_least(operator, seen + 2), timeout=30)
    assert await pod_names(kube, namespace) == ["unlabelled", "young-orphan"]
    assert "WARNING: GC deleting orphaned instance" in operator.log_text()
    assert f"pods/{namespace}/old-orphan" in operator.log_text()


async def _at_least(operator: OperatorProcess, count: int) -> bool:
    return sweeps(operator) >= count


@pytest.mark.operator_env(**FAST_GC)
async def test_a_pod_deleted_out_of_band_is_recreated(
    kube: KubeClient, namespace: str, operator: OperatorProcess, squid_pods: PodLister
) -> None:
    await kube.create(proxy_path(namespace), managed_proxy("resilient"))
    await wait_for_condition(kube, namespace, "resilient", "Provisioned", "True")
    [(name, uid, _, _)] = await squid_pods()
    await kube.delete(f"/api/v1/namespaces/{namespace}/pods/{name}")

    async def recreated() -> bool:
        pods = await squid_pods()
        return len(pods) == 1 and pods[0][1] != uid and pods[0][3] == "Running"

    await wait_for(recreated, timeout=120)
    body = await wait_for_condition(kube, namespace, "resilient", "Provisioned", "True")
    [(_, _, ip, _)] = await squid_pods()
    assert body["status"]["ip"] == ip


@pytest.mark.operator_env(**FAST_GC)
async def test_a_stack_whose_proxy_vanished_is_destroyed(
    kube: KubeClient, namespace: str, operator: OperatorProcess, squid_pods: PodLister
) -> None:
    await kube.create(proxy_path(namespace), managed_proxy("abandoned"))
    await wait_for_condition(kube, namespace, "abandoned", "Provisioned", "True")
    operator.stop()
    body = await kube.get(proxy_path(namespace, "abandoned"))
    finalizers = [f for f in body["metadata"]["finalizers"] if f != FINALIZER]
    await kube.patch(proxy_path(namespace, "abandoned"), {"metadata": {"finalizers": finalizers}})
    await kube.delete(proxy_path(namespace, "abandoned"))
    await wait_gone(kube, proxy_path(namespace, "abandoned"))
    assert len(await squid_pods()) == 1, "the pod outlives its Proxy until the GC runs"

    operator.start()

    async def cleaned() -> bool:
        stacks = operator.state_dir / "backend" / ".pulumi" / "stacks"
        return not await squid_pods() and not list(stacks.rglob("*.json"))

    await wait_for(cleaned, timeout=120)
    assert "WARNING: GC destroying stack" in operator.log_text()

    async def sweep_done() -> bool:
        return "destroyed 1," in operator.log_text()

    await wait_for(sweep_done, timeout=30)
    async with aiohttp.ClientSession() as session, session.get(operator.metrics_url) as response:
        exposition = await response.text()
    destroys = [
        sample.value
        for family in text_string_to_metric_families(exposition)
        for sample in family.samples
        if sample.name == "egress_proxies_stack_operations_total"
        and sample.labels == {"op": "destroy", "result": "ok"}
    ]
    assert destroys == [1.0], "the GC's destroy is counted like the handlers' ones"
