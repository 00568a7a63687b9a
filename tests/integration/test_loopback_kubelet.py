"""Smoke tests of the dev cluster's loopback kubelet against real squid processes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import aiohttp
import pytest

from egress_proxies.devcluster import ApiError, KubeClient
from egress_proxies.devcluster.processes import process_runs
from tests.conftest import wait_for
from tests.integration.origins import ORIGIN_BODY, serve_origin

OPEN_SQUID_CONF = """\
http_port 3128
http_access allow all
"""


def squid_pod(name: str, *, image: str = "ubuntu/squid:6.10-24.10_beta") -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "containers": [
                {
                    "name": "squid",
                    "image": image,
                    "ports": [{"containerPort": 3128}],
                    "volumeMounts": [
                        {
                            "name": "config",
                            "mountPath": "/etc/squid/squid.conf",
                            "subPath": "squid.conf",
                        }
                    ],
                }
            ],
            "volumes": [{"name": "config", "configMap": {"name": f"{name}-config"}}],
        },
    }


async def start_squid_pod(
    kube: KubeClient, namespace: str, name: str, config: str, **pod: Any
) -> dict[str, Any]:
    await kube.create(
        f"/api/v1/namespaces/{namespace}/configmaps",
        {"metadata": {"name": f"{name}-config"}, "data": {"squid.conf": config}},
    )
    await kube.create(f"/api/v1/namespaces/{namespace}/pods", squid_pod(name, **pod))
    return await wait_for_phase(kube, namespace, name, {"Running", "Failed"})


async def wait_for_phase(
    kube: KubeClient, namespace: str, name: str, phases: set[str]
) -> dict[str, Any]:
    async def settled() -> dict[str, Any] | None:
        pod = await kube.get(f"/api/v1/namespaces/{namespace}/pods/{name}")
        return pod if pod.get("status", {}).get("phase") in phases else None

    return await wait_for(settled, timeout=30)


def squid_pid(pod: dict[str, Any]) -> int:
    container_id: str = pod["status"]["containerStatuses"][0]["containerID"]
    return int(container_id.removeprefix("loopback://"))


async def test_squid_pod_runs_proxies_http_and_connect_and_stops_on_delete(
    kube: KubeClient, namespace: str, tmp_path: Path
) -> None:
    pod = await start_squid_pod(kube, namespace, "squid", OPEN_SQUID_CONF)
    assert pod["status"]["phase"] == "Running", pod["status"]
    pod_ip = pod["status"]["podIP"]
    assert pod_ip.startswith("127.") and pod_ip != "127.0.0.1"
    assert pod["spec"]["nodeName"] == "loopback"
    ready = {c["type"]: c["status"] for c in pod["status"]["conditions"]}
    assert ready["Ready"] == "True"
    pid = squid_pid(pod)
    assert process_runs(pid, "squid")

    proxy = f"http://{pod_ip}:3128"
    async with (
        serve_origin() as http_origin,
        serve_origin(tmp_path) as https_origin,
        aiohttp.ClientSession() as session,
    ):
        async with session.get(http_origin.url, proxy=proxy) as response:
            assert response.status == 200
            assert await response.text() == ORIGIN_BODY
            assert "squid" in response.headers.get("Via", "")
        assert https_origin.client_ssl is not None
        async with session.get(
            https_origin.url, proxy=proxy, ssl=https_origin.client_ssl
        ) as response:
            assert response.status == 200
            assert await response.text() == ORIGIN_BODY

    await kube.delete(f"/api/v1/namespaces/{namespace}/pods/squid")

    async def pod_gone() -> bool:
        listing = await kube.get(f"/api/v1/namespaces/{namespace}/pods")
        return not listing["items"]

    await wait_for(pod_gone, timeout=30)
    assert not process_runs(pid, "squid")


async def test_pod_with_unknown_image_fails_with_a_clear_reason(
    kube: KubeClient, namespace: str
) -> None:
    pod = await start_squid_pod(kube, namespace, "web", OPEN_SQUID_CONF, image="nginx:1.27")
    assert pod["status"]["phase"] == "Failed"
    assert pod["status"]["reason"] == "UnsupportedImage"
    assert "nginx:1.27" in pod["status"]["message"]


async def test_pod_with_bad_squid_config_fails_with_squids_error(
    kube: KubeClient, namespace: str
) -> None:
    config = OPEN_SQUID_CONF + "no_such_directive on\nhttp_access allow nobody_acl\n"
    pod = await start_squid_pod(kube, namespace, "broken", config)
    assert pod["status"]["phase"] == "Failed"
    assert pod["status"]["reason"] == "InvalidConfig"
    assert "nobody_acl" in pod["status"]["message"]


async def test_a_token_without_rights_is_forbidden(kube: KubeClient, namespace: str) -> None:
    await kube.create(
        f"/api/v1/namespaces/{namespace}/serviceaccounts", {"metadata": {"name": "nobody"}}
    )
    issued = await kube.create(
        f"/api/v1/namespaces/{namespace}/serviceaccounts/nobody/token",
        {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}},
    )
    token = issued["status"]["token"]
    credentials = kube.credentials.with_token(token)
    async with KubeClient(credentials) as nobody:
        review = await nobody.create(
            "/apis/authentication.k8s.io/v1/selfsubjectreviews",
            {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"},
        )
        assert review["status"]["userInfo"]["username"] == (
            f"system:serviceaccount:{namespace}:nobody"
        )
        with pytest.raises(ApiError) as denied:
            await nobody.get(f"/api/v1/namespaces/{namespace}/pods")
        assert denied.value.status == 403
        assert "forbidden" in denied.value.message
