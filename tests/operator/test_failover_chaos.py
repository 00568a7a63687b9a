"""Two operators on one shared backend (a real PostgreSQL), ranked by start; the active one is
SIGKILLed 10 times while a pool scales 0 -> 20 -> 5 -> 20, and comes back as the standby.

At the end every member is Ready, Proxies = stacks = squid pods, no stack lock is left,
and a census (a watch of the test's own) never saw the pool above `replicas + maxSurge`.
Each kill comes once the pool has moved on (a Proxy created or deleted) since the last.
"""

from __future__ import annotations

import contextlib
import os
import secrets
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from egress_proxies.kube import KubeApiError, KubeClient
from egress_proxies.kube.resources import PROXY_POOLS
from egress_proxies.stacks.backends import open_backend, parse_backend_url
from egress_proxies.stacks.naming import PROJECT
from harness.census import ProxyCensus
from harness.cluster import ClusterHandle, wait_for
from harness.operator import OperatorProcess, new_operator, proxy_path
from harness.origins import Origin, serve_origin
from harness.postgres import PostgresServer
from tests.operator.test_operator_restart import SURGE, create_pool, pool_body, settled

pytestmark = pytest.mark.e2e

LIFETIME = 15
# (replicas, what the census sees the pool do, kills of the active meanwhile)
MOVE_SECONDS = 30
PHASES = ((20, "created", 4), (5, "deleting", 3), (20, "created", 3))
STANDING_BY = "has a higher priority"  # the standby's GC, every sweep interval


@pytest.fixture
async def origin() -> AsyncIterator[Origin]:
    async with serve_origin() as served:
        yield served


async def moved_on(census: ProxyCensus, what: str) -> None:
    """Until the census sees one more Proxy `created` or `deleting`, for at most MOVE_SECONDS.

    The kills land at moments the pool is moving; a phase that finished early
    gets its remaining kills while it is settled, which is a moment too.
    """
    before = len(getattr(census, what))

    async def moved() -> bool:
        return len(getattr(census, what)) > before

    with contextlib.suppress(AssertionError):  # wait_for's timeout
        await wait_for(moved, timeout=MOVE_SECONDS, interval=0.05)


class Pair:
    """Two operators, one active; `kill_active` SIGKILLs it and restarts it as the standby."""

    def __init__(self, active: OperatorProcess, standby: OperatorProcess) -> None:
        self.active, self.standby = active, standby
        self.kills = 0

    async def kill_active(self) -> None:
        self.active.kill()
        self.kills += 1
        self.active, self.standby = self.standby, self.active
        seen = self.standby.log_text().count(STANDING_BY)
        self.standby.start()

        async def standing_by() -> bool:
            return self.standby.log_text().count(STANDING_BY) > seen

        await wait_for(standing_by, timeout=90, interval=0.5)


async def test_the_active_killed_at_moments_while_a_pool_scales(
    kube: KubeClient,
    dev_cluster: ClusterHandle,
    namespace: str,
    tmp_path: Path,
    postgres_server: PostgresServer,
    origin: Origin,
) -> None:
    url = f"{postgres_server.url}&table=chaos_{secrets.token_hex(3)}"
    env = {
        "EGRESS_PROXIES_STATE_BACKEND": url,
        **postgres_server.env,
        "EGRESS_PROXIES_PRIORITY_BY_START": "true",
        "EGRESS_PROXIES_PEERING_LIFETIME_SECONDS": str(LIFETIME),
        "EGRESS_PROXIES_GC_INTERVAL_SECONDS": "2",
        "PULUMI_CONFIG_PASSPHRASE": secrets.token_urlsafe(16),
    }
    operators = []
    for name in ("one", "two"):
        (tmp_path / name).mkdir()
        operators.append(new_operator(dev_cluster.kubeconfig, namespace, tmp_path / name, env))
    pair = Pair(*operators)
    pair.active.start()
    pair.standby.start()
    pool = "chaos"
    try:
        await create_pool(kube, namespace, pool_body(pool, 0, origin))

        async def listable() -> bool:  # a new cluster answers 429 while the CRDs initialize
            try:
                await kube.get(proxy_path(namespace))
            except KubeApiError as error:
                if error.status == 429:
                    return False
                raise
            return True

        await wait_for(listable, timeout=60, interval=0.5)
        async with ProxyCensus(kube, namespace, pool=pool) as census:
            for replicas, what, kills in PHASES:
                await kube.patch(
                    PROXY_POOLS.path(namespace, pool), {"spec": {"replicas": replicas}}
                )
                for _ in range(kills):
                    await moved_on(census, what)
                    await pair.kill_active()
                await settled(kube, namespace, pool, replicas)
        census.check()
        print(census, f"kills: {pair.kills}")
        assert census.peak <= 20 + SURGE
        assert pair.kills == sum(kills for _, _, kills in PHASES) == 10

        listing = await kube.get(proxy_path(namespace))
        proxies = sorted(f"{namespace}.{p['metadata']['name']}" for p in listing["items"])
        os.environ.update(postgres_server.env)
        backend = open_backend(parse_backend_url(url), tmp_path, PROJECT)

        async def consistent() -> bool:
            pods = await kube.get(f"/api/v1/namespaces/{namespace}/pods")
            running = [p for p in pods["items"] if not p["metadata"].get("deletionTimestamp")]
            return backend.stacks() == proxies and len(running) == len(proxies) == 20

        await wait_for(consistent, timeout=120, interval=1)
        assert backend.lock_holders() == set(), "no stack lock is left"
    finally:
        for operator in operators:
            operator.stop()
