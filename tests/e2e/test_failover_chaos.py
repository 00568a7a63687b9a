"""Two operators on one shared backend (a real PostgreSQL), ranked by start; the active one is
SIGKILLed at moments while a pool scales 0 -> 6 -> 2 -> 6, and comes back as the standby.

At the end every member is Ready, Proxies = stacks = squid pods, no stack lock is left,
and a census (a watch of the test's own) never saw the pool above `replicas + maxSurge`.
A smaller run of the issue's chaos scenario (10 kills, 0 -> 20 -> 5 -> 20): the same
checks, sized for a shared 2-core machine.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from egress_proxies.kube import KubeClient
from egress_proxies.kube.resources import PROXY_POOLS
from egress_proxies.stacks.backends import open_backend, parse_backend_url
from egress_proxies.stacks.naming import PROJECT
from harness.census import ProxyCensus
from harness.cluster import ClusterHandle, wait_for
from harness.operator import OperatorProcess, new_operator, proxy_path
from harness.origins import Origin, serve_origin
from harness.postgres import PostgresServer
from tests.e2e.test_operator_restart import SURGE, begun, create_pool, pool_body, settled

LIFETIME = 15
STANDING_BY = "has a higher priority"  # the standby's GC, every sweep interval


@pytest.fixture
async def origin() -> AsyncIterator[Origin]:
    async with serve_origin() as served:
        yield served


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
        async with ProxyCensus(kube, namespace, pool=pool) as census:
            for replicas, what in ((6, "created"), (2, "deleting"), (6, "created")):
                before = len(getattr(census, what))
                await kube.patch(
                    PROXY_POOLS.path(namespace, pool), {"spec": {"replicas": replicas}}
                )

                async def moved(what: str = what, before: int = before) -> bool:
                    return len(getattr(census, what)) > before

                await wait_for(moved, timeout=120, interval=0.05)
                await pair.kill_active()
                await begun(census, what)
                await pair.kill_active()
                await settled(kube, namespace, pool, replicas)
        census.check()
        print(census, f"kills: {pair.kills}")
        assert census.peak <= 6 + SURGE

        listing = await kube.get(proxy_path(namespace))
        proxies = sorted(f"{namespace}.{p['metadata']['name']}" for p in listing["items"])
        os.environ.update(postgres_server.env)
        backend = open_backend(parse_backend_url(url), tmp_path, PROJECT)

        async def consistent() -> bool:
            pods = await kube.get(f"/api/v1/namespaces/{namespace}/pods")
            running = [p for p in pods["items"] if not p["metadata"].get("deletionTimestamp")]
            return backend.stacks() == proxies and len(running) == len(proxies) == 6

        await wait_for(consistent, timeout=120, interval=1)
        assert backend.lock_holders() == set(), "no stack lock is left"
    finally:
        for operator in operators:
            operator.stop()
