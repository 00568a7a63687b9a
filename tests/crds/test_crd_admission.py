"""The API server rejects invalid Proxies at admission, naming the field, and defaults the rest."""

from __future__ import annotations

from typing import Any

import pytest

from egress_proxies.kube import KubeApiError, KubeClient
from egress_proxies.model import GROUP, PLURAL, VERSION

pytestmark = pytest.mark.integration


def proxy(spec: dict[str, Any], name: str = "p") -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "Proxy",
        "metadata": {"name": name},
        "spec": spec,
    }


INVALID: list[tuple[str, dict[str, Any], str]] = [
    ("external-without-endpoint", {"mode": "External"}, "spec.endpoint"),
    (
        "managed-with-endpoint",
        {"provider": "kubernetes", "kubernetes": {}, "endpoint": {"host": "h", "port": 1}},
        "spec.endpoint",
    ),
    ("managed-without-provider", {"kubernetes": {}}, "spec.provider"),
    (
        "external-with-provider-block",
        {"mode": "External", "endpoint": {"host": "h", "port": 1}, "kubernetes": {}},
        "External proxies take no provider",
    ),
    ("unknown-provider", {"provider": "aws"}, "spec.provider"),
    ("unknown-mode", {"mode": "Sometimes"}, "spec.mode"),
    (
        "port-out-of-range",
        {"mode": "External", "endpoint": {"host": "h", "port": 70000}},
        "spec.endpoint.port",
    ),
    (
        "interval-too-long",
        {"provider": "kubernetes", "kubernetes": {}, "healthCheck": {"intervalSeconds": 7200}},
        "spec.healthCheck.intervalSeconds",
    ),
    (
        "timeout-above-interval",
        {
            "provider": "kubernetes",
            "kubernetes": {},
            "healthCheck": {"intervalSeconds": 5, "timeoutSeconds": 10},
        },
        "timeoutSeconds must not exceed",
    ),
    (
        "zero-failure-threshold",
        {"provider": "kubernetes", "kubernetes": {}, "healthCheck": {"failureThreshold": 0}},
        "spec.healthCheck.failureThreshold",
    ),
    (
        "health-url-not-http",
        {"provider": "kubernetes", "kubernetes": {}, "healthCheck": {"url": "ftp://x"}},
        "spec.healthCheck.url",
    ),
    (
        "zero-max-leases",
        {"provider": "kubernetes", "kubernetes": {}, "maxLeases": 0},
        "spec.maxLeases",
    ),
    (
        "gcp-block-with-kubernetes-provider",
        {"provider": "kubernetes", "gcp": {"zone": "europe-west1-b"}},
        "spec.gcp is only valid with provider gcp",
    ),
    (
        "endpoint-bad-scheme",
        {"mode": "External", "endpoint": {"scheme": "socks5", "host": "h", "port": 1}},
        "spec.endpoint.scheme",
    ),
]


@pytest.mark.parametrize(("case", "spec", "field"), INVALID, ids=[case for case, _, _ in INVALID])
async def test_invalid_proxies_are_rejected_naming_the_field(
    kube: KubeClient, namespace: str, case: str, spec: dict[str, Any], field: str
) -> None:
    path = f"/apis/{GROUP}/{VERSION}/namespaces/{namespace}/{PLURAL}"
    with pytest.raises(KubeApiError) as rejected:
        await kube.create(path, proxy(spec, case))
    assert rejected.value.status == 422, rejected.value
    assert field in rejected.value.message, rejected.value.message
    listing = await kube.get(path)
    assert listing["items"] == []


async def test_valid_proxies_get_the_schema_defaults(kube: KubeClient, namespace: str) -> None:
    path = f"/apis/{GROUP}/{VERSION}/namespaces/{namespace}/{PLURAL}"
    created = await kube.create(path, proxy({"provider": "kubernetes", "kubernetes": {}}))
    spec = created["spec"]
    assert spec["mode"] == "Managed"
    assert spec["maxLeases"] == 1
    # No image default in the schema: the operator's --squid-image fills it in.
    assert "image" not in spec["kubernetes"]
    assert spec["healthCheck"]["failureThreshold"] == 3
    assert "expectBody" not in spec["healthCheck"]
