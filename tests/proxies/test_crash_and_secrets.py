"""The operator killed mid-`up` converges after a restart; secrets never leak in plaintext."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest

from egress_proxies.kube import KubeClient
from egress_proxies.vocabulary import CLOUD_INIT_LABEL
from harness.operator import (
    OperatorProcess,
    managed_proxy,
    proxy_path,
    wait_for_condition,
)
from tests.conftest import PodLister, wait_for

pytestmark = pytest.mark.e2e


def lock_files(operator: OperatorProcess) -> list[Path]:
    return list((operator.state_dir / "backend" / ".pulumi" / "locks").rglob("*.json"))


async def test_killed_during_up_the_operator_converges_after_restart(
    kube: KubeClient, namespace: str, operator: OperatorProcess, squid_pods: PodLister
) -> None:
    await kube.create(proxy_path(namespace), managed_proxy("crash"))

    async def up_running() -> bool:
        return any(" up " in f" {line} " for line in operator.pulumi_invocations()) and bool(
            lock_files(operator)
        )

    await wait_for(up_running, timeout=60, interval=0.05)
    operator.kill()
    assert lock_files(operator), "the killed pulumi left its lock behind"

    operator.start()
    body = await wait_for_condition(kube, namespace, "crash", "Provisioned", "True", timeout=180)
    pods = await squid_pods()
    assert len(pods) == 1 and pods[0][3] == "Running", pods
    assert pods[0][2] == body["status"]["ip"]
    assert lock_files(operator) == []
    stacks = list((operator.state_dir / "backend" / ".pulumi" / "stacks").rglob("*.json"))
    assert [path.stem for path in stacks] == [f"{namespace}.crash"]


async def test_password_and_cloud_init_never_appear_in_plaintext(
    kube: KubeClient, namespace: str, operator: OperatorProcess
) -> None:
    cloud_init = "#cloud-config\nwrite_files: [{path: /etc/motd, content: s3cr3t-c1oud-1n1t}]\n"
    await kube.create(
        f"/api/v1/namespaces/{namespace}/secrets",
        {
            "metadata": {"name": "init", "labels": {CLOUD_INIT_LABEL: "true"}},
            "stringData": {"user-data": cloud_init},
        },
    )
    await kube.create(
        proxy_path(namespace), managed_proxy("secretive", cloudInit={"secretRef": {"name": "init"}})
    )
    body = await wait_for_condition(kube, namespace, "secretive", "Provisioned", "True")
    secret = await kube.get(
        f"/api/v1/namespaces/{namespace}/secrets/{body['status']['credentialsSecret']}"
    )
    password = base64.b64decode(secret["data"]["password"]).decode()
    assert len(password) >= 24
    needles = [password, "s3cr3t-c1oud-1n1t"]

    files = [path for path in operator.state_dir.rglob("*") if path.is_file()]
    assert any(path.suffix == ".json" for path in files), "the backend has state files"
    for path in files:
        content = path.read_bytes()
        for needle in needles:
            assert needle.encode() not in content, f"{needle[:4]}... found in {path}"
    log = operator.log_text()
    assert log, "the operator logged something"
    status = json.dumps(body["status"])
    for needle in needles:
        assert needle not in log
        assert needle not in status
