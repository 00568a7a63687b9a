"""The operator runs with a client-certificate kubeconfig (as against kind) and provisions."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from egress_proxies.kube import KubeClient
from harness.cluster import ClusterHandle
from harness.operator import (
    managed_proxy,
    new_operator,
    proxy_path,
    wait_for_condition,
    wait_gone,
)
from harness.origins import serve_origin

pytestmark = pytest.mark.e2e

TIMESTAMP = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} ", re.MULTILINE)
# 401 as a status code (`'code': 401`, `-> 401`, `status=401`), not inside a port
# such as 0.0.0.0:40157, a number like 14012 or a duration like 0.401 s.
UNAUTHORIZED_STATUS = re.compile(r"(?<![\w.:])401(?![\w.])")


async def test_a_client_certificate_kubeconfig_provisions_a_ready_proxy(
    kube: KubeClient, dev_cluster: ClusterHandle, namespace: str, tmp_path: Path
) -> None:
    kubeconfig = dev_cluster.layout.kubeconfig_cert
    (user,) = (entry["user"] for entry in yaml.safe_load(kubeconfig.read_text())["users"])
    assert set(user) == {"client-certificate-data", "client-key-data"}  # no token to fall back on
    operator = new_operator(kubeconfig, namespace, tmp_path)
    operator.start()
    try:
        async with serve_origin() as origin:
            health = {
                "url": origin.url,
                "expectedStatus": 200,
                "intervalSeconds": 1,
                "timeoutSeconds": 1,
            }
            await kube.create(proxy_path(namespace), managed_proxy("cert", healthCheck=health))
            body = await wait_for_condition(kube, namespace, "cert", "Healthy", "True")
        assert body["status"]["phase"] == "Ready"
        assert body["status"]["ip"]
        await kube.delete(proxy_path(namespace, "cert"))
        await wait_gone(kube, proxy_path(namespace, "cert"))
        # What each line says, without its timestamp (whose milliseconds can read 401).
        said = TIMESTAMP.sub("", operator.log_text())
        assert not UNAUTHORIZED_STATUS.search(said), said
        assert "Unauthorized" not in said
    finally:
        operator.stop()
