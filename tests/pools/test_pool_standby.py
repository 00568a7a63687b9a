"""A pool round on a replica that is not the one at work changes nothing, and says so once."""

from __future__ import annotations

import logging
from typing import cast

import pytest

from egress_proxies.clock import ManualClock
from egress_proxies.kube import KubeClient
from egress_proxies.pools import DemandBook, PoolComponents, PoolController
from tests.pools.test_pool_controller_time import Members, RecordingClient, pool

pytestmark = pytest.mark.unit


class Creating(RecordingClient):
    """Takes every write; remembers the Proxies created."""

    def __init__(self) -> None:
        super().__init__()
        self.created: list[str] = []

    async def create(self, path: str, body: dict[str, object]) -> dict[str, object]:
        self.created.append(str(cast(dict[str, str], body["metadata"])["name"]))
        return body


class Gate:
    def __init__(self, reason: str | None) -> None:
        self.reason = reason

    async def __call__(self) -> str | None:
        return self.reason


async def test_a_replica_standing_by_runs_no_round_until_it_is_at_work(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock, client, gate = ManualClock(), Creating(), Gate("op-a has a higher priority")

    async def no_leases() -> dict[str, dict[str | None, int]]:
        return {}

    controller = PoolController(
        PoolComponents(
            client=cast(KubeClient, client),
            members=Members(),
            lease_counts=no_leases,  # type: ignore[arg-type]
            demand=DemandBook(clock),
            max_lease_seconds=3600.0,
            clock=clock,
            standby=gate,
        )
    )
    with caplog.at_level(logging.INFO, logger="egress_proxies.pools.controller"):
        for _ in range(3):
            await controller.converge(pool(2), lambda *_: None)
    assert client.created == [] and client.patches == []
    assert controller.rounds == 0
    standing = [r for r in caplog.records if "standing by" in r.getMessage()]
    assert [(r.levelno, r.getMessage()) for r in standing] == [
        (logging.INFO, "pool crawl/p: standing by: op-a has a higher priority")
    ], "once per pool, not per round, and not as an error"
    gate.reason = None  # the replica at work stopped: this one takes over
    await controller.converge(pool(2), lambda *_: None)
    assert len(client.created) == 2
