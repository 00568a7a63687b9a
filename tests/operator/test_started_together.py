"""Two replicas started at the same moment, as a fresh `kubectl apply -k deploy/ha` starts both,
over Proxies that exist and Proxies created as they start: one works, and every Proxy is
provisioned.

kopf resumes a replica at its first look at the peering object when no live peer listed there
outranks it; two replicas that start together could both look before the other had written
its keep-alive, and both work until their next look (`operator/peering.py`, joining). Two
operator processes on one shared backend (a real PostgreSQL), ranked by start, in rounds: both
start, Proxies are created the moment they have joined, a pool makes its members at the same
moment; exactly one kopf resumes and none is paused after resuming, and every Proxy ends up
provisioned; then both stop, and start together again over what is there (a restart of both,
with the Proxies, their statuses and kopf's state on them already present).
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
STARTING = "peering 'egress-proxies' as"  # logged once joined, right before kopf starts
RESUMED = "Resuming operations"  # kopf, when its first look finds no peer above it
PAUSED = "Pausing operations"  # kopf, when a peer above it appears after it resumed


@pytest.fixture
async def origin() -> AsyncIterator[Origin]:
    async with serve_origin() as served:
        yield served


async def kopf_starting(operators: list[OperatorProcess], times: int) -> None:
    async def both() -> bool:
        return all(o.log_text().count(STARTING) >= times for o in operators)

    await wait_for(both, timeout=120, interval=0.02)


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
                resumed = [o.log_text().count(RESUMED) for o in operators]
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
                working = [
                    o.log_text().count(RESUMED) - n for o, n in zip(operators, resumed, strict=True)
                ]
                assert sorted(working) == [0, 1], f"round {round_}: kopf resumed {working}"
                assert not any(PAUSED in o.log_text() for o in operators), "a replica was paused"
                for operator in operators:
                    operator.stop()
        census.check()
    finally:
        for operator in operators:
            operator.stop()
    runs = {o.state_dir.parent.name: len(o.pulumi_invocations()) for o in operators}
    print(census, f"pulumi runs per replica: {runs}")
    assert census.peak <= REPLICAS + SURGE
