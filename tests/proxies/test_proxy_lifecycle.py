"""A Proxy from apply to delete, on the dev cluster with real pulumi and real squid."""

from __future__ import annotations

import base64
import json
import subprocess

import aiohttp
import pytest

from egress_proxies import toolchain
from egress_proxies.kube import KubeClient
from egress_proxies.vocabulary import CLOUD_INIT_LABEL, SPEC_HASH_ANNOTATION
from harness.operator import (
    RESHAPED,
    OperatorProcess,
    managed_proxy,
    proxy_credentials,
    proxy_path,
    wait_for_condition,
    wait_gone,
)
from harness.origins import ORIGIN_BODY, serve_origin
from tests.conftest import PodLister, PodRow, wait_for

pytestmark = pytest.mark.e2e


def stacks_on_backend(operator: OperatorProcess) -> list[str]:
    listing = subprocess.run(
        [str(toolchain.find("pulumi")), "stack", "ls", "--all", "--json"],
        env={
            **operator.env,
            "PULUMI_BACKEND_URL": f"file://{operator.state_dir / 'backend'}",
            "PULUMI_HOME": str(operator.state_dir / "pulumi-home"),
        },
        capture_output=True,
        text=True,
        check=True,
    )
    return sorted(entry["name"].rsplit("/", 1)[-1] for entry in json.loads(listing.stdout))


async def fetch_through(proxy_url: str, auth: str | None, origin_url: str) -> int:
    # Plain HTTP through a proxy: the header goes with the request itself.
    headers = (
        {"Proxy-Authorization": "Basic " + base64.b64encode(auth.encode()).decode()}
        if auth
        else None
    )
    async with (
        aiohttp.ClientSession() as session,
        session.get(origin_url, proxy=proxy_url, headers=headers) as response,
    ):
        if response.status == 200:
            assert await response.text() == ORIGIN_BODY
        return response.status


async def test_apply_edit_rotate_and_delete(
    kube: KubeClient, namespace: str, operator: OperatorProcess, squid_pods: PodLister
) -> None:
    await kube.create(
        f"/api/v1/namespaces/{namespace}/secrets",
        {
            "metadata": {"name": "init", "labels": {CLOUD_INIT_LABEL: "true"}},
            "stringData": {"user-data": "#cloud-config\nruncmd: [echo one]\n"},
        },
    )
    await kube.create(
        proxy_path(namespace), managed_proxy("p1", cloudInit={"secretRef": {"name": "init"}})
    )
    body = await wait_for_condition(kube, namespace, "p1", "Provisioned", "True")
    status = body["status"]
    proxy_url = f"http://{status['ip']}:{status['port']}"
    auth = await proxy_credentials(kube, namespace, body)
    async with serve_origin() as origin:
        assert await fetch_through(proxy_url, auth, origin.url) == 200
        assert await fetch_through(proxy_url, None, origin.url) == 407
        assert await fetch_through(proxy_url, "crawler:wrong", origin.url) == 407
    assert stacks_on_backend(operator) == [f"{namespace}.p1"]
    [(pod_name, first_uid, first_ip, _)] = await squid_pods()

    # A spec change that shapes the instance replaces the pod.
    await kube.patch(
        proxy_path(namespace, "p1"),
        {"spec": {"kubernetes": RESHAPED}},
    )

    async def replaced_once() -> list[PodRow] | None:
        pods = await squid_pods()
        if len(pods) == 1 and pods[0][1] != first_uid and pods[0][3] == "Running":
            return pods
        return None

    [(_, second_uid, second_ip, _)] = await wait_for(replaced_once, timeout=120)
    body = await wait_for_condition(kube, namespace, "p1", "Provisioned", "True")
    assert body["status"]["ip"] == second_ip != first_ip
    assert stacks_on_backend(operator) == [f"{namespace}.p1"]

    # Rotating the cloud-init Secret replaces the instance too.
    await kube.patch(
        f"/api/v1/namespaces/{namespace}/secrets/init",
        {"stringData": {"user-data": "#cloud-config\nruncmd: [echo two]\n"}},
    )

    async def rotated() -> list[PodRow] | None:
        pods = await squid_pods()
        if len(pods) == 1 and pods[0][1] not in (first_uid, second_uid) and pods[0][3] == "Running":
            return pods
        return None

    await wait_for(rotated, timeout=120)
    assert len(await squid_pods()) == 1

    # Delete: everything goes, the stack too, and the finalizer is released.
    secrets_before = await kube.get(f"/api/v1/namespaces/{namespace}/secrets")
    generated = [
        s["metadata"]["name"] for s in secrets_before["items"] if s["metadata"]["name"] != "init"
    ]
    assert generated, "the credentials Secret exists before deletion"
    await kube.delete(proxy_path(namespace, "p1"))
    await wait_gone(kube, proxy_path(namespace, "p1"))

    # The pod was deleted with the stack; on a real node it ends after squid's shutdown.
    async def no_pods() -> bool:
        return await squid_pods() == []

    await wait_for(no_pods, timeout=60)
    configmaps = await kube.get(f"/api/v1/namespaces/{namespace}/configmaps")
    assert [c["metadata"]["name"] for c in configmaps["items"]] == ["kube-root-ca.crt"]
    secrets_after = await kube.get(f"/api/v1/namespaces/{namespace}/secrets")
    assert [s["metadata"]["name"] for s in secrets_after["items"]] == ["init"]
    assert stacks_on_backend(operator) == []
    assert pod_name.startswith("proxy-")


async def test_a_missing_provider_block_fails_then_recovers_after_an_edit(
    kube: KubeClient, namespace: str, operator: OperatorProcess
) -> None:
    await kube.create(
        proxy_path(namespace),
        {
            "apiVersion": "crawl.example.com/v1alpha1",
            "kind": "Proxy",
            "metadata": {"name": "p2"},
            "spec": {"provider": "gcp"},
        },
    )
    body = await wait_for_condition(kube, namespace, "p2", "Provisioned", "False", "PermanentError")
    assert body["status"]["phase"] == "Failed"
    provisioned = next(c for c in body["status"]["conditions"] if c["type"] == "Provisioned")
    assert "spec.gcp" in provisioned["message"]
    await kube.patch(
        proxy_path(namespace, "p2"), {"spec": {"provider": "kubernetes", "kubernetes": {}}}
    )
    body = await wait_for_condition(kube, namespace, "p2", "Provisioned", "True")
    assert body["status"]["phase"] in ("Provisioned", "Ready")


async def test_an_unchanged_proxy_starts_no_pulumi_process_on_restart(
    kube: KubeClient, namespace: str, operator: OperatorProcess
) -> None:
    await kube.create(proxy_path(namespace), managed_proxy("p3"))
    await wait_for_condition(kube, namespace, "p3", "Provisioned", "True")

    async def hash_recorded() -> bool:
        body = await kube.get(proxy_path(namespace, "p3"))
        return SPEC_HASH_ANNOTATION in (body["metadata"].get("annotations") or {})

    await wait_for(hash_recorded, timeout=30)
    operator.stop()
    before = operator.pulumi_invocations()
    log_offset = len(operator.log_text())
    operator.start()

    async def handled(times: int) -> bool:
        return operator.log_text()[log_offset:].count("succeeded") >= times

    # The resume handler reconciles the unchanged Proxy...
    await wait_for(lambda: handled(1), timeout=60)
    # ...and an edit that does not shape the instance is handled without pulumi too.
    await kube.patch(proxy_path(namespace, "p3"), {"spec": {"attributes": {"region": "eu"}}})
    await wait_for(lambda: handled(2), timeout=60)
    after = operator.pulumi_invocations()
    assert after[len(before) :] == [], after[len(before) :]
    body = await kube.get(proxy_path(namespace, "p3"))
    assert body["status"]["phase"] in ("Provisioned", "Ready")
