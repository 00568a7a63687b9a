"""The Kubernetes client against the dev cluster's real API server: each auth kind, typed errors."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from egress_proxies.devcluster.controlplane import free_port
from egress_proxies.kube import (
    ConflictError,
    Credentials,
    KubeApiError,
    KubeClient,
    NotFoundError,
    TransportError,
)
from harness.cluster import ClusterHandle

pytestmark = pytest.mark.integration

REVIEW = {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}


async def who_am_i(client: KubeClient) -> dict[str, Any]:
    review = await client.create("/apis/authentication.k8s.io/v1/selfsubjectreviews", REVIEW)
    user_info: dict[str, Any] = review["status"]["userInfo"]
    return user_info


async def test_the_token_kubeconfig_authenticates_as_the_admin(dev_cluster: ClusterHandle) -> None:
    credentials = Credentials.from_kubeconfig(dev_cluster.layout.kubeconfig)
    assert credentials.auth_kinds == ("token",)
    async with KubeClient(credentials) as client:
        user = await who_am_i(client)
    assert user["username"] == "dev-admin"
    assert "system:masters" in user["groups"]


async def test_the_client_certificate_kubeconfig_authenticates_as_the_admin(
    dev_cluster: ClusterHandle,
) -> None:
    credentials = Credentials.from_kubeconfig(dev_cluster.layout.kubeconfig_cert)
    assert credentials.auth_kinds == ("client-certificate",)
    async with KubeClient(credentials) as client:
        user = await who_am_i(client)
        await client.get("/api/v1/namespaces/default")
    assert user["username"] == "dev-admin"
    assert "system:masters" in user["groups"]


async def test_an_exec_plugin_token_is_fetched_once_and_reused(
    kube: KubeClient, namespace: str, tmp_path: Path
) -> None:
    await kube.create(
        f"/api/v1/namespaces/{namespace}/serviceaccounts", {"metadata": {"name": "plugged"}}
    )
    issued = await kube.create(
        f"/api/v1/namespaces/{namespace}/serviceaccounts/plugged/token",
        {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}},
    )
    credential = {
        "apiVersion": "client.authentication.k8s.io/v1",
        "kind": "ExecCredential",
        "status": {"token": issued["status"]["token"]},
    }
    plugin = tmp_path / "plugin"
    plugin.write_text(
        f"#!/bin/sh\necho run >> {tmp_path / 'runs'}\ncat <<'EOF'\n{json.dumps(credential)}\nEOF\n"
    )
    plugin.chmod(0o755)
    source = yaml.safe_load(dev_cluster_kubeconfig(kube).read_text())
    source["users"][0]["user"] = {
        "exec": {"apiVersion": "client.authentication.k8s.io/v1", "command": str(plugin)}
    }
    kubeconfig = tmp_path / "kubeconfig-exec"
    kubeconfig.write_text(yaml.safe_dump(source))
    async with KubeClient(Credentials.from_kubeconfig(kubeconfig)) as client:
        user = await who_am_i(client)
        await who_am_i(client)
        with pytest.raises(KubeApiError) as denied:
            await client.get(f"/api/v1/namespaces/{namespace}/secrets")
    assert user["username"] == f"system:serviceaccount:{namespace}:plugged"
    assert denied.value.status == 403
    assert (tmp_path / "runs").read_text() == "run\n"


def dev_cluster_kubeconfig(kube: KubeClient) -> Path:
    fname = kube.credentials.config.fname
    assert fname is not None
    return Path(fname)


async def test_api_errors_are_typed_by_status(kube: KubeClient, namespace: str) -> None:
    configmaps = f"/api/v1/namespaces/{namespace}/configmaps"
    with pytest.raises(NotFoundError) as missing:
        await kube.get(f"{configmaps}/absent")
    assert (missing.value.status, missing.value.reason) == (404, "NotFound")
    assert await kube.delete(f"{configmaps}/absent") is None

    body = {"metadata": {"name": "once"}, "data": {"k": "v"}}
    created = await kube.create(configmaps, body)
    with pytest.raises(ConflictError) as exists:
        await kube.create(configmaps, body)
    assert (exists.value.status, exists.value.reason) == (409, "AlreadyExists")

    stale = {**body, "metadata": {"name": "once", "resourceVersion": "1"}}
    await kube.patch(f"{configmaps}/once", {"data": {"k": "newer"}})
    with pytest.raises(ConflictError):
        await kube.request("PUT", f"{configmaps}/once", body=stale)
    assert created["metadata"]["resourceVersion"] != "1"

    with pytest.raises(KubeApiError) as invalid:
        await kube.create(configmaps, {"metadata": {"name": "Not_A_Name"}})
    assert invalid.value.status == 422
    assert not isinstance(invalid.value, (NotFoundError, ConflictError))


async def test_server_side_apply_creates_then_owns_its_fields(
    kube: KubeClient, namespace: str
) -> None:
    path = f"/api/v1/namespaces/{namespace}/configmaps/applied"
    body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "applied"}}
    await kube.apply(path, {**body, "data": {"a": "1"}}, field_manager="test")
    await kube.patch(path, {"data": {"b": "2"}})
    applied = await kube.apply(path, {**body, "data": {"a": "3"}}, field_manager="test")
    assert applied["data"] == {"a": "3", "b": "2"}
    managers = {entry["manager"] for entry in applied["metadata"]["managedFields"]}
    assert "test" in managers


async def test_list_and_watch_filter_by_label(kube: KubeClient, namespace: str) -> None:
    configmaps = f"/api/v1/namespaces/{namespace}/configmaps"
    for name, labels in (("picked", {"team": "a"}), ("other", {"team": "b"})):
        await kube.create(configmaps, {"metadata": {"name": name, "labels": labels}})
    listing = await kube.list(configmaps, label_selector="team=a")
    assert [item["metadata"]["name"] for item in listing["items"]] == ["picked"]
    version = listing["metadata"]["resourceVersion"]
    await kube.patch(f"{configmaps}/other", {"data": {"x": "1"}})
    await kube.patch(f"{configmaps}/picked", {"data": {"x": "1"}})
    events = kube.watch(
        configmaps, resource_version=version, timeout_seconds=5, label_selector="team=a"
    )
    async for event in events:
        if event["type"] != "BOOKMARK":
            break
    assert (event["type"], event["object"]["metadata"]["name"]) == ("MODIFIED", "picked")


async def test_an_unreachable_server_is_a_transport_error(dev_cluster: ClusterHandle) -> None:
    ca_pem = dev_cluster.credentials.ca_pem
    assert ca_pem is not None
    nowhere = Credentials.from_token(f"https://127.0.0.1:{free_port()}", ca_pem, "t")
    async with KubeClient(nowhere) as client:
        with pytest.raises(TransportError) as refused:
            await client.get("/api/v1/namespaces")
    assert isinstance(refused.value, OSError)
    assert "ConnectError" in str(refused.value)
