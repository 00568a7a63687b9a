"""The operator restarted (SIGTERM, SIGKILL) while a pool is steady, scales or rolls.

Real operator (`egress-proxies run` on the host), real squid pods on the dev
cluster's node. A census (a watch of the test's own, from before the
restart) counts the pool's Proxies at every moment: those in service never
above `replicas + maxSurge` (a draining member, which takes no new lease and
goes once its leases end, is not counted, as a Deployment's surge does not
count terminating pods), each Proxy created or deleted once, and on a steady
pool no Proxy leaves Ready.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from egress_proxies.kube import KubeApiError, KubeClient
from egress_proxies.kube.resources import PROXY_POOLS
from egress_proxies.vocabulary import POOL_LABEL
from harness.census import ProxyCensus
from harness.cluster import ClusterHandle, wait_for
from harness.operator import OperatorProcess, new_operator, proxy_path
from harness.operator_metrics import converged_rounds
from harness.origins import Origin, serve_origin
from tests.conftest import RESTRICTED

pytestmark = pytest.mark.e2e

SURGE = 1  # the pools' maxSurge (the default)


@pytest.fixture(scope="module")
def restart_operator(
    dev_cluster: ClusterHandle, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[OperatorProcess]:
    """One operator for the module, watching a namespace named after it; tests restart it."""
    namespace = f"restarts-{int(time.time()) % 100000}"
    process = new_operator(
        dev_cluster.kubeconfig, namespace, tmp_path_factory.mktemp("restart-operator")
    )
    yield process
    process.stop()


@pytest.fixture(scope="module")
async def pools_namespace(
    dev_cluster: ClusterHandle, restart_operator: OperatorProcess
) -> AsyncIterator[str]:
    async with KubeClient(dev_cluster.credentials) as kube:
        await kube.create(
            "/api/v1/namespaces",
            {"metadata": {"name": restart_operator.namespace, "labels": RESTRICTED}},
        )
    restart_operator.start()
    yield restart_operator.namespace
    async with KubeClient(dev_cluster.credentials) as kube:
        await kube.delete(f"/api/v1/namespaces/{restart_operator.namespace}")


@pytest.fixture(scope="module")
async def origin() -> AsyncIterator[Origin]:
    async with serve_origin() as served:
        yield served


def pool_body(name: str, replicas: int, origin: Origin, attribute: str = "a") -> dict[str, Any]:
    health = {"url": origin.url, "expectedStatus": 200, "intervalSeconds": 1, "timeoutSeconds": 1}
    return {
        "apiVersion": PROXY_POOLS.api_version,
        "kind": "ProxyPool",
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "strategy": {"maxSurge": SURGE, "maxUnavailable": 0},
            "template": {
                "spec": {
                    "provider": "kubernetes",
                    "kubernetes": {},
                    "attributes": {"pool": name, "version": attribute},
                    "healthCheck": health,
                }
            },
        },
    }


async def create_pool(kube: KubeClient, namespace: str, body: dict[str, Any]) -> None:
    """Create a pool, waiting out a new cluster's 429 while the CRD's storage initializes."""

    async def created() -> bool:
        try:
            await kube.create(PROXY_POOLS.path(namespace), body)
        except KubeApiError as error:
            if error.status == 429:
                return False
            raise
        return True

    await wait_for(created, timeout=60, interval=0.5)


async def begun(census: ProxyCensus, what: str) -> None:
    """Wait until the census has seen the first Proxy `created` or `deleting`."""

    async def seen() -> bool:
        return bool(getattr(census, what))

    await wait_for(seen, timeout=60, interval=0.05)


async def restart(operator: OperatorProcess, how: str, pool: str) -> None:
    """Stop the operator as `how` says, start it again, and wait for 3 rounds of `pool`."""
    if how == "SIGKILL":
        operator.kill()
    else:
        operator.stop()
    operator.start()

    async def rounds_run() -> bool:
        return await converged_rounds(operator, pool) >= 3

    await wait_for(rounds_run, timeout=120, interval=0.5)


async def settled(
    kube: KubeClient, namespace: str, pool: str, replicas: int, *, version: str | None = None
) -> None:
    """The pool at `replicas` Ready members (of `version`, if given), none draining or leaving."""

    async def whole() -> bool:
        try:
            body = await kube.get(PROXY_POOLS.path(namespace, pool))
            listing = await kube.get(proxy_path(namespace))
        except KubeApiError as error:
            if error.status == 429:  # the CRDs' storage (re)initializing on a new cluster
                return False
            raise
        status = body.get("status") or {}
        members = [
            p
            for p in listing["items"]
            if (p["metadata"].get("labels") or {}).get(POOL_LABEL) == pool
        ]
        wanted = [
            p
            for p in members
            if (p.get("status") or {}).get("phase") == "Ready"
            and (version is None or p["spec"]["attributes"]["version"] == version)
        ]
        return (
            len(members) == len(wanted) == replicas
            and status.get("readyReplicas") == replicas
            and status.get("observedGeneration") == body["metadata"]["generation"]
        )

    await wait_for(whole, timeout=300, interval=0.5)


async def test_a_stable_pool_is_untouched_by_a_sigterm_and_a_sigkill_restart(
    kube: KubeClient, pools_namespace: str, restart_operator: OperatorProcess, origin: Origin
) -> None:
    namespace, pool = pools_namespace, "steady"
    await create_pool(kube, namespace, pool_body(pool, 3, origin))
    await settled(kube, namespace, pool, 3)

    async with ProxyCensus(kube, namespace, pool=pool) as census:
        for how in ("SIGTERM", "SIGKILL"):
            await restart(restart_operator, how, f"{namespace}/{pool}")
            await settled(kube, namespace, pool, 3)

    print(census, census.phases)
    assert census.created == [] and census.deleting == []
    assert census.peak == census.peak_all == 3  # nothing drained either
    assert census.flapped() == {}  # health seeded from status: Ready throughout


@pytest.mark.parametrize("how", ["SIGKILL", "SIGTERM"])
async def test_a_restart_while_scaling_up_then_down_makes_and_removes_each_proxy_once(
    kube: KubeClient,
    pools_namespace: str,
    restart_operator: OperatorProcess,
    origin: Origin,
    how: str,
) -> None:
    namespace, pool = pools_namespace, f"scaling-{how.lower()}"
    await create_pool(kube, namespace, pool_body(pool, 1, origin))
    await settled(kube, namespace, pool, 1)

    async with ProxyCensus(kube, namespace, pool=pool) as census:
        await kube.patch(PROXY_POOLS.path(namespace, pool), {"spec": {"replicas": 4}})
        await begun(census, "created")
        await restart(restart_operator, how, f"{namespace}/{pool}")  # mid scale-up
        await settled(kube, namespace, pool, 4)
        assert len(census.created) == 3

        await kube.patch(PROXY_POOLS.path(namespace, pool), {"spec": {"replicas": 1}})
        await begun(census, "deleting")
        await restart(restart_operator, how, f"{namespace}/{pool}")  # mid scale-down
        await settled(kube, namespace, pool, 1)

    census.check()
    print(census)
    assert len(census.created) == 3  # none after the scale-up
    assert len(census.deleting) == 3 == len(set(census.deleting))
    assert census.peak <= 4 + SURGE


async def test_a_restart_during_a_rolling_template_change_replaces_each_member_once(
    kube: KubeClient, pools_namespace: str, restart_operator: OperatorProcess, origin: Origin
) -> None:
    namespace, pool = pools_namespace, "rolling"
    await create_pool(kube, namespace, pool_body(pool, 3, origin))
    await settled(kube, namespace, pool, 3)

    async with ProxyCensus(kube, namespace, pool=pool) as census:
        await kube.patch(
            PROXY_POOLS.path(namespace, pool),
            {"spec": {"template": pool_body(pool, 3, origin, attribute="b")["spec"]["template"]}},
        )
        await begun(census, "created")
        await restart(restart_operator, "SIGKILL", f"{namespace}/{pool}")  # mid roll
        await settled(kube, namespace, pool, 3, version="b")

    census.check()
    print(census)
    assert len(census.created) == 3  # one new member per old one
    assert len(census.deleting) == 3 == len(set(census.deleting))
    assert census.peak <= 3 + SURGE
