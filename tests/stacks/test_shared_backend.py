"""The operator on a shared state backend, on the dev cluster's real node: postgres:// on a
real PostgreSQL and s3:// on a real versitygw, both on loopback.

Create, replace on a spec change, the orphan GC destroying a stack whose Proxy vanished
(run by a second operator with an empty state dir and the same passphrase), delete; the
host's pulumi CLI lists the stacks from the same backend throughout.
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import subprocess
from pathlib import Path

import pytest

from egress_proxies import toolchain
from egress_proxies.kube import KubeClient
from egress_proxies.vocabulary import FINALIZER
from harness.cluster import ClusterHandle
from harness.operator import (
    RESHAPED,
    OperatorProcess,
    managed_proxy,
    new_operator,
    proxy_path,
    wait_for_condition,
    wait_gone,
)
from harness.postgres import PostgresServer
from harness.s3 import S3Server
from tests.conftest import PodLister, wait_for

pytestmark = pytest.mark.e2e

FAST_GC = {
    "EGRESS_PROXIES_GC_INTERVAL_SECONDS": "3",
    "EGRESS_PROXIES_GC_MIN_AGE_SECONDS": "20",
}


@pytest.fixture(params=["postgres", "s3"])
def backend_env(request: pytest.FixtureRequest) -> dict[str, str]:
    """The operator's variables for a backend of this test's own."""
    if request.param == "postgres":
        server: PostgresServer = request.getfixturevalue("postgres_server")
        url = f"{server.url}&table=e2e_{secrets.token_hex(4)}"
        return {"EGRESS_PROXIES_STATE_BACKEND": url, **server.env}
    s3: S3Server = request.getfixturevalue("s3_server")
    bucket = f"e2e-{secrets.token_hex(4)}"
    s3.create_bucket(bucket)
    return {"EGRESS_PROXIES_STATE_BACKEND": s3.url(bucket, "operator"), **s3.env}


def host_stack_list(env: dict[str, str], home: Path) -> list[str]:
    """`pulumi stack ls --all` from the host CLI with the operator's URL, secret and passphrase."""
    home.mkdir(exist_ok=True)
    listing = subprocess.run(
        [str(toolchain.find("pulumi")), "stack", "ls", "--all", "--json"],
        env={
            "PATH": f"{toolchain.bin_dir()}{os.pathsep}{os.environ['PATH']}",
            "HOME": str(home),
            "PULUMI_HOME": str(home / ".pulumi"),
            "PULUMI_SKIP_UPDATE_CHECK": "true",
            "PULUMI_BACKEND_URL": env["EGRESS_PROXIES_STATE_BACKEND"],
            "PULUMI_CONFIG_PASSPHRASE": env["PULUMI_CONFIG_PASSPHRASE"],
            **{k: v for k, v in env.items() if k.startswith(("PG", "AWS_"))},
        },
        cwd=home,
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    return sorted(entry["name"].rsplit("/", 1)[-1] for entry in json.loads(listing.stdout))


async def listed(env: dict[str, str], home: Path) -> list[str]:
    return await asyncio.to_thread(host_stack_list, env, home)


async def test_create_replace_gc_and_delete_on_a_shared_backend(
    kube: KubeClient,
    namespace: str,
    dev_cluster: ClusterHandle,
    tmp_path: Path,
    backend_env: dict[str, str],
    squid_pods: PodLister,
) -> None:
    env = {**backend_env, **FAST_GC, "PULUMI_CONFIG_PASSPHRASE": secrets.token_urlsafe(16)}
    laptop = tmp_path / "laptop"
    (tmp_path / "first").mkdir()
    first = new_operator(dev_cluster.kubeconfig, namespace, tmp_path / "first", env)
    first.start()
    try:
        await kube.create(proxy_path(namespace), managed_proxy("kept"))
        await kube.create(proxy_path(namespace), managed_proxy("abandoned"))
        await wait_for_condition(kube, namespace, "kept", "Provisioned", "True")
        await wait_for_condition(kube, namespace, "abandoned", "Provisioned", "True")
        assert await listed(env, laptop) == [f"{namespace}.abandoned", f"{namespace}.kept"]

        # A spec change that shapes the instance replaces the pod.
        before = {row[1] for row in await squid_pods()}
        await kube.patch(proxy_path(namespace, "kept"), {"spec": {"kubernetes": RESHAPED}})

        async def replaced() -> bool:
            pods = await squid_pods()
            fresh = [row for row in pods if row[1] not in before]
            return len(pods) == 2 and len(fresh) == 1 and fresh[0][3] == "Running"

        await wait_for(replaced, timeout=180)
        await wait_for_condition(kube, namespace, "kept", "Provisioned", "True")
    finally:
        first.stop()

    # The Proxy vanishes while no operator runs; its stack and pod are orphans.
    body = await kube.get(proxy_path(namespace, "abandoned"))
    finalizers = [f for f in body["metadata"]["finalizers"] if f != FINALIZER]
    await kube.patch(proxy_path(namespace, "abandoned"), {"metadata": {"finalizers": finalizers}})
    await kube.delete(proxy_path(namespace, "abandoned"))
    await wait_gone(kube, proxy_path(namespace, "abandoned"))

    # Another replica: an empty state dir, the same backend and passphrase.
    (tmp_path / "second").mkdir()
    second: OperatorProcess = new_operator(
        dev_cluster.kubeconfig, namespace, tmp_path / "second", env
    )
    second.start()
    try:

        async def swept() -> bool:
            return len(await squid_pods()) == 1 and await listed(env, laptop) == [
                f"{namespace}.kept"
            ]

        await wait_for(swept, timeout=180, interval=2)
        assert "GC destroying stack" in second.log_text()

        await kube.delete(proxy_path(namespace, "kept"))
        await wait_gone(kube, proxy_path(namespace, "kept"), timeout=180)

        async def nothing_left() -> bool:
            return await squid_pods() == [] and await listed(env, laptop) == []

        await wait_for(nothing_left, timeout=120, interval=2)
        assert env["PGPASSWORD" if "PGPASSWORD" in env else "AWS_SECRET_ACCESS_KEY"] not in (
            first.log_text() + second.log_text()
        )
    finally:
        second.stop()
