"""The API server rejects invalid ProxyPools at admission (CEL rules), and defaults valid ones."""

from __future__ import annotations

from typing import Any

import pytest

from egress_proxies.kube import KubeApiError, KubeClient
from egress_proxies.model import GROUP, VERSION
from egress_proxies.pool_model import POOL_PLURAL

pytestmark = pytest.mark.integration

TEMPLATE = {"spec": {"provider": "kubernetes", "kubernetes": {}}}


def pool(spec: dict[str, Any], name: str = "p") -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "ProxyPool",
        "metadata": {"name": name},
        "spec": {"template": TEMPLATE, **spec},
    }


INVALID: list[tuple[str, dict[str, Any], str]] = [
    (
        "min-above-max",
        {"replicas": 3, "autoscale": {"minReplicas": 5, "maxReplicas": 4}},
        "minReplicas must not exceed",
    ),
    (
        "replicas-above-max",
        {"replicas": 9, "autoscale": {"minReplicas": 1, "maxReplicas": 4}},
        "spec.replicas must lie within",
    ),
    (
        "replicas-below-min",
        {"replicas": 1, "autoscale": {"minReplicas": 2, "maxReplicas": 4}},
        "spec.replicas must lie within",
    ),
    (
        "min-idle-above-max",
        {"replicas": 1, "autoscale": {"maxReplicas": 2, "minIdle": 3}},
        "minIdle must not exceed",
    ),
    (
        "no-surge-no-unavailable",
        {"replicas": 2, "strategy": {"maxSurge": 0, "maxUnavailable": 0}},
        "must not both be 0",
    ),
    ("max-age-too-short", {"rotation": {"maxAgeSeconds": 5}}, "maxAgeSeconds must be at least"),
    ("zero-ban-window", {"rotation": {"banWindowSeconds": 0}}, "banWindowSeconds"),
    ("zero-max-bans", {"rotation": {"maxBans": 0}}, "maxBans"),
    (
        "min-available-above-replicas",
        {"replicas": 2, "rotation": {"minAvailable": 3}},
        "minAvailable must not exceed",
    ),
    (
        "scale-down-delay-zero",
        {"autoscale": {"maxReplicas": 2, "scaleDownDelaySeconds": 0}},
        "scaleDownDelaySeconds",
    ),
    ("negative-replicas", {"replicas": -1}, "spec.replicas"),
    ("invalid-template", {"template": {"spec": {"kubernetes": {}}}}, "spec.provider is required"),
]


@pytest.mark.parametrize(("case", "spec", "field"), INVALID, ids=[case for case, _, _ in INVALID])
async def test_invalid_pools_are_rejected_naming_the_rule(
    kube: KubeClient, namespace: str, case: str, spec: dict[str, Any], field: str
) -> None:
    path = f"/apis/{GROUP}/{VERSION}/namespaces/{namespace}/{POOL_PLURAL}"
    with pytest.raises(KubeApiError) as rejected:
        await kube.create(path, pool(spec, case))
    assert rejected.value.status == 422, rejected.value
    assert field in rejected.value.message, rejected.value.message
    assert (await kube.get(path))["items"] == []


async def test_a_valid_pool_gets_the_defaults_and_scales_through_the_subresource(
    kube: KubeClient, namespace: str
) -> None:
    path = f"/apis/{GROUP}/{VERSION}/namespaces/{namespace}/{POOL_PLURAL}"
    created = await kube.create(
        path, pool({"replicas": 2, "autoscale": {"minReplicas": 1, "maxReplicas": 4}})
    )
    spec = created["spec"]
    assert spec["strategy"] == {"maxSurge": 1, "maxUnavailable": 0}
    assert spec["rotation"]["minAvailable"] == 1
    assert spec["autoscale"]["scaleDownDelaySeconds"] == 300
    scaled = await kube.patch(f"{path}/p/scale", {"spec": {"replicas": 3}})
    assert scaled["spec"]["replicas"] == 3
    with pytest.raises(
        KubeApiError
    ) as rejected:  # the CEL bounds hold through the scale subresource
        await kube.patch(f"{path}/p/scale", {"spec": {"replicas": 7}})
    assert rejected.value.status == 422
    assert (await kube.get(f"{path}/p"))["spec"]["replicas"] == 3
