"""Two replicas started at the same moment, as a fresh `kubectl apply -k deploy/ha` starts both,
over Proxies that exist and Proxies created as they start: every one is provisioned.

kopf's peering pauses a replica only once it sees a higher-priority peer's keep-alive, so two
replicas that start together can both run handlers for a moment. Whatever the one that is
then paused recorded on a Proxy must not keep the one at work from handling it. Two operator
processes on one shared backend (a real PostgreSQL), ranked by start, in rounds: both start,
Proxies are created the moment their kopf starts, a pool makes its members at the same
moment, and every Proxy must end up provisioned; then both stop, and start together again
over what is there.
"""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from egress_proxies.kube import KubeClient
from harness.census import ProxyCensus
from harness.cluster import ClusterHandle, wait_for
from harness.operator import (
    OperatorProcess,
    managed_proxy,
    new_operator,
    proxy_path,
    wait_for_condition,
)
from harness.origins import Origin, serve_origin
from harness.postgres import PostgresServer
from tests.operator.test_operator_restart import SURGE, create_pool, pool_body, settled

pytestmark = pytest.mark.e2e

ROUNDS = 2
POOL = "together"
REPLICAS = 2
BURST = 3  # Proxies created the moment both replicas' kopf starts
STARTING = "peering 'egress-proxies' as"  # logged right before kopf starts


@pytest.fixture
async def origin() -> AsyncIterator[Origin]:
    async with serve_origin() as served:
        yield served


async def kopf_starting(operators: list[OperatorProcess], times: int) -> None:
    async def both() -> bool:
        return all(o.log_text().count(STARTING) >= times for o in operators)

    await wait_for(both, timeout=120, interval=0.02)


# A known bug, not fixed (issue 43): a replica whose gate read comes before the
# other's first keep-alive can still act in kopf's startup window, and one run
# in two on a loaded machine leaves a Proxy unprovisioned for minutes. Kept
# running so the day it always passes shows as XPASS.
@pytest.mark.xfail(reason="two replicas started together can still strand a Proxy (issue 43)")
async def test_replicas_started_together_provision_every_proxy(
    kube: KubeClient,
    dev_cluster: ClusterHandle,
    namespace: str,
    tmp_path: Path,
    postgres_server: PostgresServer,
    origin: Origin,
) -> None:
    env = {
        "EGRESS_PROXIES_STATE_BACKEND": (
            f"{postgres_server.url}&table=together_{secrets.token_hex(3)}"
        ),
        **postgres_server.env,
        "EGRESS_PROXIES_PRIORITY_BY_START": "true",
        "EGRESS_PROXIES_PEERING_LIFETIME_SECONDS": "15",
        "PULUMI_CONFIG_PASSPHRASE": secrets.token_urlsafe(16),
    }
    operators = []
    for name in ("one", "two"):
        (tmp_path / name).mkdir()
        operators.append(new_operator(dev_cluster.kubeconfig, namespace, tmp_path / name, env))
    await create_pool(kube, namespace, pool_body(POOL, REPLICAS, origin))
    names: list[str] = []
    try:
        async with ProxyCensus(kube, namespace, pool=POOL) as census:
            for round_ in range(ROUNDS):
                before = f"before-{round_}"
                await kube.create(proxy_path(namespace), managed_proxy(before))
                names.append(before)
                for operator in operators:  # a few milliseconds apart
                    operator.start()
                await kopf_starting(operators, round_ + 1)
                for n in range(BURST):
                    during = f"during-{round_}-{n}"
                    await kube.create(proxy_path(namespace), managed_proxy(during))
                    names.append(during)
                for name in names:
                    await wait_for_condition(
                        kube, namespace, name, "Provisioned", "True", timeout=180
                    )
                await settled(kube, namespace, POOL, REPLICAS)
                for operator in operators:
                    operator.stop()
        census.check()
    finally:
        for operator in operators:
            operator.stop()
    runs = {o.state_dir.parent.name: len(o.pulumi_invocations()) for o in operators}
    print(census, f"pulumi runs per replica: {runs}")
    assert census.peak <= REPLICAS + SURGE
