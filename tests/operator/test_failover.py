"""Two operators on one shared backend (a real PostgreSQL), ranked by start: the active one is
SIGKILLed and a Proxy is created at that moment; the standby completes it.

Prints how long each takeover took, against the peering lifetime (the bound): the figure
docs/operations.md "High availability" states. The assertions are about behaviour only.
"""

from __future__ import annotations

import secrets
import time
from pathlib import Path

import pytest

from egress_proxies.kube import KubeClient
from harness.cluster import ClusterHandle
from harness.operator import (
    OperatorProcess,
    managed_proxy,
    new_operator,
    proxy_path,
    wait_for_condition,
)
from harness.postgres import PostgresServer
from tests.conftest import wait_for

pytestmark = pytest.mark.e2e

LIFETIME = 15
# A peering operator starts paused; its GC says whom it stands by for, every sweep interval.
PAUSED = "has a higher priority"
ROUNDS = 2


async def paused_again(operator: OperatorProcess, times: int) -> None:
    async def seen() -> bool:
        return operator.log_text().count(PAUSED) >= times

    await wait_for(seen, timeout=90, interval=0.5)


async def test_the_standby_completes_a_proxy_created_as_the_active_dies(
    kube: KubeClient,
    dev_cluster: ClusterHandle,
    namespace: str,
    tmp_path: Path,
    postgres_server: PostgresServer,
) -> None:
    table = f"failover_{secrets.token_hex(3)}"
    env = {
        "EGRESS_PROXIES_STATE_BACKEND": f"{postgres_server.url}&table={table}",
        **postgres_server.env,
        "EGRESS_PROXIES_PRIORITY_BY_START": "true",
        "EGRESS_PROXIES_PEERING_LIFETIME_SECONDS": str(LIFETIME),
        "PULUMI_CONFIG_PASSPHRASE": secrets.token_urlsafe(16),
        "EGRESS_PROXIES_GC_INTERVAL_SECONDS": "2",
    }
    operators = []
    for name in ("one", "two"):
        (tmp_path / name).mkdir()
        operators.append(new_operator(dev_cluster.kubeconfig, namespace, tmp_path / name, env))
    active, standby = operators
    active.start()
    await kube.create(proxy_path(namespace), managed_proxy("warm"))
    await wait_for_condition(kube, namespace, "warm", "Provisioned", "True", timeout=180)
    standby.start()
    await paused_again(standby, 1)

    takeovers = []
    try:
        for round_ in range(ROUNDS):
            active.kill()
            started = time.monotonic()
            await kube.create(proxy_path(namespace), managed_proxy(f"after-kill-{round_}"))
            await wait_for_condition(
                kube, namespace, f"after-kill-{round_}", "Provisioned", "True", timeout=180
            )
            takeovers.append(time.monotonic() - started)
            # The killed one comes back, younger: now it is the standby.
            active, standby = standby, active
            pauses = standby.log_text().count(PAUSED)
            standby.start()
            await paused_again(standby, pauses + 1)
    finally:
        for operator in operators:
            operator.stop()
    print(
        f"\ntakeover after SIGKILL, create -> Provisioned: "
        f"{', '.join(f'{t:.1f} s' for t in takeovers)} (peering lifetime {LIFETIME} s)"
    )
    assert len(takeovers) == ROUNDS
