"""deploy/ha as users apply it: two operator pods on the dev cluster's node, one at work.

The stacks live in a real PostgreSQL (Debian's, a process on this machine
listening on the cluster's host address), the leases in the overlay's Redis
pod. One install serves the module: a pool of two Proxies, then a rolling
restart of the Deployment while a crawler leases through the operator's
Service, then the active replica's pod deleted with grace 0, then its
operator SIGKILLed inside the container. After each crash a Proxy created at
that moment must be completed by the standby; the time it took is printed
against the peering lifetime (the bound), not asserted (bench.failover
takes the median over several).
"""

from __future__ import annotations

import asyncio
import json
import secrets
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from egress_proxies.kube import KubeClient
from egress_proxies.kube.resources import NAMESPACES, PODS, SERVICE_ACCOUNTS
from egress_proxies.stacks.backends import open_backend, parse_backend_url
from egress_proxies.stacks.naming import PROJECT
from harness.census import ProxyCensus
from harness.cluster import ClusterHandle, wait_for
from harness.deploy import NAMESPACE, Deployed
from harness.ha import (
    PEERING_LIFETIME,
    active_replica,
    deploy_ha,
    ha_backend,
    kill_operator_process,
    pair_whole,
    stack_operations,
)
from harness.lease_holder import LeaseHolder
from harness.operator import managed_proxy, proxy_path, wait_for_condition
from harness.origins import Origin, serve_origin
from harness.postgres import PostgresServer
from tests.conftest import RESTRICTED, supervised_cluster
from tests.operator.test_operator_restart import create_pool, pool_body, settled

pytestmark = pytest.mark.e2e

POOL = "leased"
HELD = 2  # leases the crawler holds at once (one per member)
CRAWL_PACE_SECONDS = 0.2


@pytest.fixture(scope="module")
def own_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClusterHandle]:
    with supervised_cluster(tmp_path_factory) as handle:
        yield handle


@pytest.fixture(scope="module")
def backend(own_cluster: ClusterHandle) -> Iterator[PostgresServer]:
    with ha_backend(own_cluster) as server:
        yield server


@pytest.fixture(scope="module")
def deployed(
    own_cluster: ClusterHandle, backend: PostgresServer, tmp_path_factory: pytest.TempPathFactory
) -> Deployed:
    return deploy_ha(own_cluster, tmp_path_factory.mktemp("overlay"), backend)


@pytest.fixture(scope="module")
async def origin(own_cluster: ClusterHandle) -> AsyncIterator[Origin]:
    async with serve_origin(host=own_cluster.host_address) as served:
        yield served


@pytest.fixture
async def own_kube(own_cluster: ClusterHandle) -> AsyncIterator[KubeClient]:
    async with KubeClient(own_cluster.credentials) as client:
        yield client


@pytest.fixture(scope="module")
async def crawl_namespace(deployed: Deployed, own_cluster: ClusterHandle, origin: Origin) -> str:
    """A restricted namespace with a pool of two Ready Proxies, for every test of the module."""
    namespace = f"ha-{secrets.token_hex(3)}"
    async with KubeClient(own_cluster.credentials) as kube:
        await kube.create(
            NAMESPACES.path(), {"metadata": {"name": namespace, "labels": RESTRICTED}}
        )

        async def has_account() -> bool:
            listing = await kube.list(SERVICE_ACCOUNTS.path(namespace))
            return any(item["metadata"]["name"] == "default" for item in listing["items"])

        await wait_for(has_account, timeout=60)
        await create_pool(kube, namespace, pool_body(POOL, 2, origin))
        await settled(kube, namespace, POOL, 2)
    return namespace


class Crawler(LeaseHolder):
    """Leases and renews through one URL (the Service), recording every answer."""

    def __init__(self, session: aiohttp.ClientSession, url: str, token: str) -> None:
        super().__init__(POOL, held=HELD, pace_seconds=CRAWL_PACE_SECONDS)
        self._session = session
        self._url = url
        self._headers = {"Authorization": f"Bearer {token}"}
        self.unanswered = 0  # connections refused or dropped by a replica going away

    async def _call(
        self, method: str, path: str, body: dict[str, Any] | None = None
    ) -> tuple[int, dict[str, Any]] | None:
        try:
            async with self._session.request(
                method, f"{self._url}{path}", json=body, headers=self._headers
            ) as response:
                answer = await response.json() if response.status != 204 else {}
                return response.status, answer
        except (aiohttp.ClientError, TimeoutError):
            self.unanswered += 1
            return None


def service_url(deployed: Deployed) -> str:
    """The operator Service's discovery port, by ClusterIP (the host routes the cluster's block)."""
    service = json.loads(
        deployed.kubectl("-n", NAMESPACE, "get", "svc", "egress-proxies", "-o", "json")
    )
    return f"http://{service['spec']['clusterIP']}:8090"


async def test_both_replicas_are_ready_and_one_is_at_work(
    deployed: Deployed, own_kube: KubeClient, crawl_namespace: str
) -> None:
    pods = await pair_whole(own_kube)
    print(deployed.kubectl("-n", NAMESPACE, "get", "deployments,pods,pdb", "-o", "wide"))
    active = await active_replica(own_kube)
    by_name = {p["metadata"]["name"]: p for p in pods}
    (standby,) = by_name.keys() - {active}
    # The pool's two Proxies were provisioned by the replica at work alone.
    worked = {name: await stack_operations(pod) for name, pod in by_name.items()}
    print("pulumi operations by replica:", worked, "at work:", active)
    assert worked[active] >= 2 and worked[standby] == 0
    deployment = json.loads(
        deployed.kubectl("-n", NAMESPACE, "get", "deployment", "egress-proxies", "-o", "json")
    )
    assert deployment["spec"]["strategy"]["type"] == "RollingUpdate"
    assert all(
        volume.get("emptyDir") is not None
        for volume in deployment["spec"]["template"]["spec"]["volumes"]
        if volume["name"] == "state"
    )


async def test_a_rollout_restart_loses_no_lease_answers_no_5xx_and_touches_no_proxy(
    deployed: Deployed, own_kube: KubeClient, crawl_namespace: str
) -> None:
    before = {p["metadata"]["name"] for p in await pair_whole(own_kube)}
    async with (
        ProxyCensus(own_kube, crawl_namespace, pool=POOL) as census,
        aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as session,
    ):
        crawler = Crawler(session, service_url(deployed), deployed.token)
        stop = asyncio.Event()
        crawling = asyncio.create_task(crawler.crawl(stop))
        try:
            await wait_for(lambda: _some(crawler.leases), timeout=60, interval=0.2)
            rolled = crawler.now()
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
            after = {p["metadata"]["name"] for p in await pair_whole(own_kube)}
            renewals, leases = len(crawler.renewals), len(crawler.leases)
            # A call to a replica that went away waits out the client's 10 s timeout, and a
            # new lease needs an end and a lease answered in a row: the bounds allow for that.
            try:
                await wait_for(lambda: _more(crawler.renewals, renewals), timeout=60, interval=0.2)
                await wait_for(lambda: _more(crawler.leases, leases), timeout=60, interval=0.2)
            except AssertionError as missed:
                raise AssertionError(
                    f"{missed}; the roll began at {rolled} s; the crawler's calls not answered "
                    f"as expected, each after the call before it (the first 40): "
                    f"{crawler.unusual()[:40]}"
                ) from None
        finally:
            stop.set()
            await crawling
    census.check()
    print(
        census,
        f"statuses: {len(crawler.statuses)}, renewals: {len(crawler.renewals)}, "
        f"unanswered: {crawler.unanswered}, pods {sorted(before)} -> {sorted(after)}",
    )
    assert not before & after, "every replica was replaced"
    assert crawler.leases
    server_errors = [status for status in crawler.statuses + crawler.renewals if status >= 500]
    assert not server_errors, (
        f"5xx answers during the rollout: {server_errors}; the calls, in seconds since the "
        f"crawl began: {[call for call in crawler.trace if (call[2] or 0) >= 500]}; "
        f"the calls not answered as expected (the first 40): {crawler.unusual()[:40]}"
    )
    assert set(crawler.renewals) == {200}, "every lease held survived the roll"
    # 409 no_match: both members are leased (a crawler asking faster than they free up).
    assert set(crawler.statuses) <= {201, 204, 409}, crawler.statuses
    assert census.created == [] and census.deleting == []


async def test_the_standby_completes_a_proxy_created_as_the_active_pod_is_deleted(
    own_kube: KubeClient, crawl_namespace: str, origin: Origin
) -> None:
    pods = await pair_whole(own_kube)
    active = await active_replica(own_kube)
    (standby,) = [p["metadata"]["name"] for p in pods if p["metadata"]["name"] != active]
    started = time.monotonic()
    await own_kube.delete(PODS.path(NAMESPACE, active), grace_seconds=0)
    await _completed_by_the_standby(
        own_kube, crawl_namespace, origin, "after-delete", "pod deleted (grace 0)", started
    )
    assert await active_replica(own_kube) == standby
    replaced = {p["metadata"]["name"] for p in await pair_whole(own_kube)}
    assert active not in replaced and standby in replaced


async def test_the_standby_completes_a_proxy_created_as_the_active_operator_is_sigkilled(
    own_kube: KubeClient,
    crawl_namespace: str,
    origin: Origin,
    backend: PostgresServer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    pods = await pair_whole(own_kube)
    active = await active_replica(own_kube)
    (pod,) = [p for p in pods if p["metadata"]["name"] == active]
    (standby,) = [p["metadata"]["name"] for p in pods if p["metadata"]["name"] != active]
    restarts = pod["status"]["containerStatuses"][0]["restartCount"]
    started = time.monotonic()
    kill_operator_process(pod)
    await _completed_by_the_standby(
        own_kube,
        crawl_namespace,
        origin,
        "after-kill",
        "operator SIGKILLed in its container",
        started,
    )
    assert await active_replica(own_kube) == standby
    # The killed container came back in the same pod, as the standby.
    again = {p["metadata"]["name"]: p for p in await pair_whole(own_kube)}
    assert again[active]["status"]["containerStatuses"][0]["restartCount"] == restarts + 1
    # One stack per Proxy, none left locked by the killed operator.
    monkeypatch.setenv("PGPASSWORD", backend.password)
    state = open_backend(parse_backend_url(backend.url), Path("/nonexistent"), PROJECT)
    proxies = await own_kube.list(proxy_path(crawl_namespace))
    names = {f"{crawl_namespace}.{p['metadata']['name']}" for p in proxies["items"]}

    async def no_lock_left() -> bool:
        return not any(state.locked(stack) for stack in names)

    await wait_for(no_lock_left, timeout=60, interval=1)
    assert names <= set(state.stacks())


async def _completed_by_the_standby(
    kube: KubeClient, namespace: str, origin: Origin, name: str, crash: str, started: float
) -> None:
    """Create Proxy `name` right after a crash; wait until it is provisioned; print how long."""
    await kube.create(proxy_path(namespace), managed_proxy(name, healthCheck=_health(origin)))
    await wait_for_condition(kube, namespace, name, "Provisioned", "True", timeout=240)
    print(
        f"takeover, {crash}: create -> Provisioned by the standby in "
        f"{time.monotonic() - started:.1f} s (peering lifetime {PEERING_LIFETIME} s)"
    )


def _health(origin: Origin) -> dict[str, Any]:
    return {"url": origin.url, "expectedStatus": 200, "intervalSeconds": 2, "timeoutSeconds": 1}


async def _some(items: list[Any]) -> bool:
    return bool(items)


async def _more(items: list[Any], than: int) -> bool:
    return len(items) > than
