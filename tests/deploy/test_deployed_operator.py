"""The operator as users deploy it: deploy/ applied to a dev cluster, the operator a pod.

The module runs a dev cluster of its own: the deployed operator watches every
namespace, as installed, and must not meet the other tests' Proxies. Every
step is the quickstart's: Secrets, `kubectl apply -k`, a rollout, Proxies,
a lease from inside the cluster through the discovery Service.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families

from egress_proxies.devcluster.node import image_ref
from egress_proxies.kube import KubeClient
from egress_proxies.model import GROUP, VERSION
from egress_proxies.stacks.backends import FileBackend
from egress_proxies.stacks.naming import PROJECT
from egress_proxies.vocabulary import POOL_LABEL
from harness.audit import audited, granted
from harness.census import ProxyCensus
from harness.cluster import ClusterHandle, wait_for
from harness.deploy import NAMESPACE, Deployed, deploy, write_dev_overlay
from harness.operator import managed_proxy, proxy_path
from harness.origins import serve_origin
from tests.conftest import RESTRICTED, create_namespace, supervised_cluster

pytestmark = pytest.mark.e2e

SERVICE_ACCOUNT = f"system:serviceaccount:{NAMESPACE}:egress-proxies"


@pytest.fixture(scope="module")
def own_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClusterHandle]:
    with supervised_cluster(tmp_path_factory) as handle:
        yield handle


@pytest.fixture(scope="module")
def deployed(own_cluster: ClusterHandle, tmp_path_factory: pytest.TempPathFactory) -> Deployed:
    overlay = write_dev_overlay(tmp_path_factory.mktemp("overlay"))
    return deploy(own_cluster.kubeconfig, overlay)


@pytest.fixture
async def own_kube(own_cluster: ClusterHandle) -> AsyncIterator[KubeClient]:
    async with KubeClient(own_cluster.credentials) as client:
        yield client


@pytest.fixture
async def crawl_namespace(
    own_kube: KubeClient, request: pytest.FixtureRequest
) -> AsyncIterator[str]:
    name = await create_namespace(own_kube, request, RESTRICTED)
    yield name
    await own_kube.delete(f"/api/v1/namespaces/{name}")


def operator_pod(deployed: Deployed) -> dict[str, Any]:
    listing = json.loads(
        deployed.kubectl(
            "-n",
            NAMESPACE,
            "get",
            "pods",
            "-l",
            "app.kubernetes.io/name=egress-proxies",
            "-o",
            "json",
        )
    )
    running = [p for p in listing["items"] if not p["metadata"].get("deletionTimestamp")]
    assert len(running) == 1, [p["metadata"]["name"] for p in listing["items"]]
    pod: dict[str, Any] = running[0]
    return pod


def health_check(url: str) -> dict[str, Any]:
    """A Proxy's health check against the test's origin, probed every 2 s."""
    return {"url": url, "expectedStatus": 200, "intervalSeconds": 2, "timeoutSeconds": 1}


async def wait_phase(kube: KubeClient, namespace: str, name: str, phase: str) -> dict[str, Any]:
    async def reached() -> dict[str, Any] | None:
        body = await kube.get(proxy_path(namespace, name))
        return body if (body.get("status") or {}).get("phase") == phase else None

    return await wait_for(reached, timeout=300, interval=0.5)


def test_the_deployment_is_available_in_a_restricted_namespace(deployed: Deployed) -> None:
    namespace = json.loads(deployed.kubectl("get", "namespace", NAMESPACE, "-o", "json"))
    assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"
    deployment = json.loads(
        deployed.kubectl("-n", NAMESPACE, "get", "deployment", "egress-proxies", "-o", "json")
    )
    conditions = {c["type"]: c["status"] for c in deployment["status"]["conditions"]}
    assert conditions["Available"] == "True"
    pod = operator_pod(deployed)
    print(deployed.kubectl("-n", NAMESPACE, "get", "pods", "-o", "wide"))
    (container,) = pod["spec"]["containers"]
    assert container["image"] == image_ref("operator")
    uid = deployed.kubectl(
        "-n",
        NAMESPACE,
        "exec",
        pod["metadata"]["name"],
        "--",
        "python3",
        "-c",
        "import os; print(os.getuid(), os.getgid())",
    )
    assert uid.split() == ["65532", "65532"]
    # The operator's JSON logs, as `kubectl logs` shows them.
    logs = deployed.kubectl("-n", NAMESPACE, "logs", "deployment/egress-proxies")
    records = [json.loads(line) for line in logs.splitlines() if line.startswith("{")]
    assert records, logs[-2000:]


async def test_a_proxy_and_a_pool_become_ready_as_the_service_account(
    deployed: Deployed, own_cluster: ClusterHandle, own_kube: KubeClient, crawl_namespace: str
) -> None:
    async with serve_origin(host=own_cluster.host_address) as origin:
        health = health_check(origin.url)
        await own_kube.create(
            proxy_path(crawl_namespace),
            managed_proxy("solo", healthCheck=health, attributes={"pool": "solo"}),
        )
        pool = {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "ProxyPool",
            "metadata": {"name": "pair"},
            "spec": {
                "replicas": 2,
                "template": {
                    "spec": {
                        "provider": "kubernetes",
                        "kubernetes": {},
                        "attributes": {"pool": "pair"},
                        "healthCheck": health,
                    }
                },
            },
        }
        await own_kube.create(
            f"/apis/{GROUP}/{VERSION}/namespaces/{crawl_namespace}/proxypools", pool
        )
        await wait_phase(own_kube, crawl_namespace, "solo", "Ready")

        async def pool_ready() -> bool:
            body = await own_kube.get(
                f"/apis/{GROUP}/{VERSION}/namespaces/{crawl_namespace}/proxypools/pair"
            )
            return (body.get("status") or {}).get("readyReplicas") == 2

        await wait_for(pool_ready, timeout=300, interval=0.5)
        print(deployed.kubectl("get", "proxies,proxypools", "-A"))

        # Scaled down as `kubectl scale` does: one member drained (no lease) and deleted.
        deployed.kubectl("-n", crawl_namespace, "scale", "proxypool/pair", "--replicas=1")

        async def one_member() -> bool:
            members = await own_kube.list(
                proxy_path(crawl_namespace), label_selector=f"{POOL_LABEL}=pair"
            )
            return len(members["items"]) == 1

        await wait_for(one_member, timeout=120, interval=0.5)


async def pool_rounds(pod_ip: str, pool: str) -> float:
    """The converged rounds of `pool` by the operator pod at `pod_ip` (its metrics port)."""
    try:
        async with (
            aiohttp.ClientSession() as session,
            session.get(f"http://{pod_ip}:9090/metrics") as response,
        ):
            text = await response.text()
    except aiohttp.ClientError:
        return 0.0
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if (
                sample.name == "egress_proxies_pool_rounds_total"
                and sample.labels.get("pool") == pool
                and sample.labels.get("outcome") == "converged"
            ):
                return float(sample.value)
    return 0.0


async def test_a_rollout_restart_leaves_a_pool_of_20_at_20_proxies_at_every_moment(
    deployed: Deployed, own_cluster: ClusterHandle, own_kube: KubeClient, crawl_namespace: str
) -> None:
    async with serve_origin(host=own_cluster.host_address) as origin:
        pool = {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "ProxyPool",
            "metadata": {"name": "big"},
            "spec": {
                "replicas": 20,
                "template": {
                    "spec": {
                        "provider": "kubernetes",
                        "kubernetes": {},
                        "attributes": {"pool": "big"},
                        "healthCheck": health_check(origin.url),
                    }
                },
            },
        }
        pools = f"/apis/{GROUP}/{VERSION}/namespaces/{crawl_namespace}/proxypools"
        await own_kube.create(pools, pool)

        async def twenty_ready() -> bool:
            body = await own_kube.get(f"{pools}/big")
            return (body.get("status") or {}).get("readyReplicas") == 20

        await wait_for(twenty_ready, timeout=600, interval=1)
        before = operator_pod(deployed)["metadata"]["name"]

        async with ProxyCensus(own_kube, crawl_namespace, pool="big") as census:
            # kubectl runs in a thread: this event loop serves the origin the
            # proxies are probed against, and a blocked loop fails their probes.
            await asyncio.to_thread(
                deployed.kubectl, "-n", NAMESPACE, "rollout", "restart", "deployment/egress-proxies"
            )
            await asyncio.to_thread(
                deployed.kubectl,
                "-n",
                NAMESPACE,
                "rollout",
                "status",
                "deployment/egress-proxies",
                "--timeout=300s",
            )

            async def new_pod_converged() -> bool:
                pod = await asyncio.to_thread(operator_pod, deployed)
                ip = (pod.get("status") or {}).get("podIP")
                if pod["metadata"]["name"] == before or not ip:
                    return False
                return await pool_rounds(ip, f"{crawl_namespace}/big") >= 5

            await wait_for(new_pod_converged, timeout=300, interval=1)
            await wait_for(twenty_ready, timeout=120, interval=1)

        census.check()
        print(census)
        assert census.created == [] and census.deleting == []
        assert census.peak == census.peak_all == 20 and len(census.live) == 20
        assert census.flapped() == {}  # no Ready flap: health seeded from status
        await own_kube.delete(f"{pools}/big")


# Runs in the crawler pod: one page through the proxy the client leased
# (HTTP_PROXY carries the proxy's URL with its credentials).
FETCH = """
import os, sys, urllib.request
with urllib.request.urlopen(sys.argv[1], timeout=20) as response:
    print("fetched", response.status, response.read().decode())
"""


def restricted_pod(name: str, command: list[str], env: list[dict[str, Any]]) -> dict[str, Any]:
    """A pod of the operator image that PSS `restricted` admits, run once."""
    return {
        "metadata": {"name": name},
        "spec": {
            "restartPolicy": "Never",
            "securityContext": {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}},
            "containers": [
                {
                    "name": name,
                    "image": image_ref("operator"),
                    "command": command,
                    "env": env,
                    "securityContext": {
                        "allowPrivilegeEscalation": False,
                        "readOnlyRootFilesystem": True,
                        "capabilities": {"drop": ["ALL"]},
                    },
                }
            ],
        },
    }


def crawler_pod(origin_url: str, target: str) -> dict[str, Any]:
    """A crawler that leases through the discovery Service by name."""
    command = ["egress-proxies-client", "run", "--selector", "pool=crawl", "--target", target]
    env: list[dict[str, Any]] = [
        {"name": "EGRESS_PROXIES_API_URL", "value": f"http://egress-proxies.{NAMESPACE}.svc:8090"},
        {
            "name": "EGRESS_PROXIES_TOKEN",
            "valueFrom": {"secretKeyRef": {"name": "crawler-token", "key": "token"}},
        },
    ]
    return restricted_pod("crawler", [*command, "--", "python3", "-c", FETCH, origin_url], env)


async def run_to_completion(
    deployed: Deployed, kube: KubeClient, namespace: str, pod: dict[str, Any]
) -> tuple[str, str]:
    """Create `pod`, wait until it ends; its phase and its logs."""
    name = pod["metadata"]["name"]
    await kube.create(f"/api/v1/namespaces/{namespace}/pods", pod)

    async def finished() -> str | None:
        body = await kube.get(f"/api/v1/namespaces/{namespace}/pods/{name}")
        phase = body.get("status", {}).get("phase")
        return phase if phase in {"Succeeded", "Failed"} else None

    phase = await wait_for(finished, timeout=120, interval=0.5)
    logs = deployed.kubectl("-n", namespace, "logs", name)
    print(f"{name}:", logs)
    return phase, logs


async def test_a_crawler_pod_leases_by_service_name_and_fetches_through_the_proxy(
    deployed: Deployed, own_cluster: ClusterHandle, own_kube: KubeClient, crawl_namespace: str
) -> None:
    async with serve_origin(host=own_cluster.host_address) as origin:
        health = health_check(origin.url)
        await own_kube.create(
            proxy_path(crawl_namespace),
            managed_proxy("for-crawler", healthCheck=health, attributes={"pool": "crawl"}),
        )
        proxy = await wait_phase(own_kube, crawl_namespace, "for-crawler", "Ready")
        await own_kube.create(
            f"/api/v1/namespaces/{crawl_namespace}/secrets",
            {"metadata": {"name": "crawler-token"}, "stringData": {"token": deployed.token}},
        )
        phase, logs = await run_to_completion(
            deployed, own_kube, crawl_namespace, crawler_pod(origin.url, own_cluster.host_address)
        )
        assert phase == "Succeeded", logs
        pod = await own_kube.get(f"/api/v1/namespaces/{crawl_namespace}/pods/crawler")
        assert "fetched 200" in logs
        proxy_pod_ips = {
            p["status"].get("podIP")
            for p in (await own_kube.get(f"/api/v1/namespaces/{crawl_namespace}/pods"))["items"]
            if p["metadata"]["name"] != "crawler"
        }
        # The origin saw the page requested by the proxy's pod, not by the crawler's.
        crawl_hits = [peer for peer in origin.peers if peer != pod["status"].get("podIP")]
        assert set(crawl_hits) <= proxy_pod_ips and crawl_hits
    listing = json.loads(
        deployed.kubectl(
            "-n",
            NAMESPACE,
            "exec",
            operator_pod(deployed)["metadata"]["name"],
            "--",
            "python3",
            "-c",
            "import json, os, urllib.request as u; r = u.Request('http://127.0.0.1:8090/v1/proxies',"
            " headers={'Authorization': 'Bearer ' + open('/etc/egress-proxies/discovery-tokens/"
            f"{deployed.token_name}').read()}}); print(u.urlopen(r).read().decode())",
        )
        .strip()
        .splitlines()[-1]
    )
    print("after:", listing)
    assert proxy["metadata"]["name"]
    assert all(p["activeLeases"] == 0 for p in listing["proxies"])


# Runs in a pod: one scrape of the operator's metrics through its Service, as Prometheus would.
SCRAPE = """
import sys, urllib.request
with urllib.request.urlopen(sys.argv[1], timeout=20) as response:
    print(response.headers.get("Content-Type"))
    print(response.read().decode())
"""


async def test_the_metrics_service_is_scraped_from_a_pod(
    deployed: Deployed, own_kube: KubeClient, crawl_namespace: str
) -> None:
    url = f"http://egress-proxies.{NAMESPACE}.svc:9090/metrics"
    phase, logs = await run_to_completion(
        deployed,
        own_kube,
        crawl_namespace,
        restricted_pod("scraper", ["python3", "-c", SCRAPE, url], []),
    )
    assert phase == "Succeeded", logs
    assert logs.startswith("text/plain"), logs[:200]
    # The earlier tests' Proxies were provisioned by this operator: their `up`s are counted.
    ups = re.search(
        r'^egress_proxies_stack_operations_total\{op="up",result="ok"\} (\S+)$', logs, re.M
    )
    assert ups and float(ups.group(1)) >= 1, logs
    assert re.search(r"^egress_proxies_proxies\{", logs, re.M), logs


def state_backend(cluster: ClusterHandle) -> FileBackend:
    """The operator's backend, as the host sees the node's state volume."""
    ready = json.loads(cluster.layout.ready.read_text())
    return FileBackend(Path(ready["state_volume"]) / "backend", PROJECT)


def locks(backend: FileBackend) -> list[Path]:
    return sorted((backend.root / ".pulumi" / "locks").rglob("*.json"))


async def test_an_operator_pod_deleted_mid_up_is_replaced_and_finishes_the_proxy(
    deployed: Deployed, own_cluster: ClusterHandle, own_kube: KubeClient, crawl_namespace: str
) -> None:
    backend = state_backend(own_cluster)
    before = operator_pod(deployed)["metadata"]["name"]
    async with serve_origin(host=own_cluster.host_address) as origin:
        await _interrupt_an_up(deployed, own_kube, crawl_namespace, backend, before, origin.url)


async def _interrupt_an_up(
    deployed: Deployed,
    own_kube: KubeClient,
    crawl_namespace: str,
    backend: FileBackend,
    before: str,
    origin_url: str,
) -> None:
    health = health_check(origin_url)
    await own_kube.create(
        proxy_path(crawl_namespace), managed_proxy("interrupted", healthCheck=health)
    )

    # This Proxy's own lock: an earlier test's namespace may still be finalizing its stacks.
    stack = f"{crawl_namespace}.interrupted"

    def own_locks() -> list[Path]:
        return [p for p in locks(backend) if p.parent.name == stack]

    async def up_running() -> list[Path]:
        return own_locks()

    held = await wait_for(up_running, timeout=120, interval=0.05)
    print("lock held during up:", [str(p.relative_to(backend.root)) for p in held])
    # What `kubectl delete pod` does: SIGTERM, then the grace period.
    deployed.kubectl("-n", NAMESPACE, "delete", "pod", before, "--wait=false")

    async def replaced() -> bool:
        pods = await own_kube.list(
            f"/api/v1/namespaces/{NAMESPACE}/pods",
            label_selector="app.kubernetes.io/name=egress-proxies",
        )
        return any(
            p["metadata"]["name"] != before and p["status"].get("phase") == "Running"
            for p in pods["items"]
        )

    await wait_for(replaced, timeout=300, interval=0.5)
    try:
        body = await wait_phase(own_kube, crawl_namespace, "interrupted", "Ready")
    except AssertionError:
        print(deployed.kubectl("-n", crawl_namespace, "describe", "proxy", "interrupted"))
        print(deployed.kubectl("-n", NAMESPACE, "logs", "deployment/egress-proxies"))
        raise
    stacks = [s for s in backend.stacks() if s.startswith(f"{crawl_namespace}.")]
    print("stacks:", stacks, "status:", body["status"].get("phase"))
    assert len(stacks) == 1
    state = backend.read(stacks[0])
    assert state is not None and state.pending_operations == 0
    assert not own_locks()
    pods = await own_kube.get(f"/api/v1/namespaces/{crawl_namespace}/pods")
    squid = [p for p in pods["items"] if not p["metadata"].get("deletionTimestamp")]
    assert len(squid) == 1, [p["metadata"]["name"] for p in squid]


# Granted for what this install does not do in this module, each with the test that shows it used.
USED_ELSEWHERE = {
    # kopf watches Namespaces and a namespaced KopfPeering when the operator
    # runs with --namespace: tests/deploy/test_rbac.py runs it so, with these rules.
    ("namespaces", "list"): "--namespace",
    ("namespaces", "watch"): "--namespace",
    **{
        ("kopfpeerings.kopf.dev", verb): "--namespace"
        for verb in ("get", "list", "watch", "create", "patch")
    },
    # The orphan GC's inventory lists them; its first sweep comes one
    # --gc-interval (10 minutes) after start: tests/deploy/test_rbac.py sweeps.
    ("configmaps", "list"): "the orphan GC",
    # An Event series' later occurrences are PATCHed (events/recorder.py);
    # the flapping Proxy of tests/deploy/test_gitops_status.py shows it.
    ("events", "patch"): "an Event series",
    # A pod the pod watch has not shown yet is read directly (proxies/shell.py):
    # whether a run needs it depends on timing.
    ("pods", "get"): "a pod not yet watched",
    # A replica that goes back to work reads back the statuses it wrote
    # (proxies/status.py, reread_written): whether a rollout here has one depends on
    # timing; tests/proxies/test_status_writer.py shows the read.
    ("proxies.crawl.example.com", "get"): "a replica back at work",
    # A credentials Secret made before lease credentials gets its signing key
    # patched in (proxies/credentials.py): tests/proxies/test_proxy_credentials.py.
    ("secrets", "patch"): "a credentials Secret from before lease credentials",
}


# Last in the module: the audit log then holds the whole life above, a pod
# deleted mid-`up` and a rollout included.
def test_the_service_account_is_granted_only_what_the_operator_uses(
    deployed: Deployed, own_cluster: ClusterHandle
) -> None:
    can_i = deployed.kubectl("auth", "can-i", "--list", f"--as={SERVICE_ACCOUNT}")
    print(can_i)
    # Every ServiceAccount may review its own access; that is not the operator's role.
    grants = {
        (resource, verb) for resource, verb in granted(can_i) if not resource.startswith("self")
    }
    used = audited(own_cluster.layout.audit_log, SERVICE_ACCOUNT)
    print("used:", sorted(used))
    print("granted, not used here:", sorted(grants - used))
    print("used, not granted:", sorted(used - grants))
    assert used, "the audit log shows no request of the operator"
    assert not used - grants, "the operator was denied something it needs"
    unexplained = grants - used - USED_ELSEWHERE.keys()
    assert not unexplained, f"granted and never used: {sorted(unexplained)}"
