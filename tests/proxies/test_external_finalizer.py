"""An External Proxy has nothing to tear down, so it carries no finalizer and deletes at once."""

from __future__ import annotations

import pytest

from egress_proxies.devcluster.controlplane import free_port
from egress_proxies.kube import KubeClient
from egress_proxies.vocabulary import FINALIZER
from harness.operator import OperatorProcess, proxy_path, wait_for_condition, wait_gone
from tests.telemetry.test_metrics_scenario import external_proxy

pytestmark = pytest.mark.e2e


async def test_an_external_proxy_gets_no_finalizer_and_deletes_without_the_operator(
    kube: KubeClient, namespace: str, operator: OperatorProcess
) -> None:
    await kube.create(proxy_path(namespace), external_proxy("outside", free_port()))
    body = await wait_for_condition(
        kube, namespace, "outside", "Provisioned", "True", "ExternalEndpoint"
    )
    assert FINALIZER not in body["metadata"].get("finalizers", [])
    operator.stop()
    await kube.delete(proxy_path(namespace, "outside"))
    await wait_gone(kube, proxy_path(namespace, "outside"), timeout=10)
