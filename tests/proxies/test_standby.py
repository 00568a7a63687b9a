"""A replica not at work handles no Proxy; which Proxies have settled (the takeover's rule)."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

from egress_proxies.clock import ManualClock
from egress_proxies.proxies.standby import QUIET_STANDBY, Standing, settled, standing_by, unsettled
from egress_proxies.vocabulary import RECONCILE_HANDLED_ANNOTATION, RECONCILE_REQUEST_ANNOTATION

pytestmark = pytest.mark.unit


def proxy(
    name: str,
    provisioned: tuple[str, str] | None = ("True", "Created"),
    generation: int = 1,
    observed: int = 1,
    **meta: Any,
) -> dict[str, Any]:
    conditions = []
    if provisioned is not None:
        status, reason = provisioned
        conditions.append(
            {
                "type": "Provisioned",
                "status": status,
                "reason": reason,
                "lastTransitionTime": "2026-06-01T12:00:00Z",
                "observedGeneration": observed,
            }
        )
    return {
        "metadata": {"namespace": "ns", "name": name, "generation": generation, **meta},
        "status": {"conditions": conditions},
    }


def test_a_provisioned_or_latched_proxy_has_settled() -> None:
    assert settled(proxy("up"))
    assert settled(proxy("failed-for-good", ("False", "PermanentError")))


@pytest.mark.parametrize(
    "body",
    [
        proxy("never-handled", provisioned=None),
        proxy("retrying", ("False", "TransientError")),
        proxy("pod-died", ("False", "InstanceFailed")),
        proxy("spec-changed", generation=2, observed=1),
        proxy("latched-for-an-older-spec", ("False", "PermanentError"), generation=2),
        proxy("deleting", deletionTimestamp="2026-06-01T12:00:00Z"),
        proxy("recreate-asked", annotations={RECONCILE_REQUEST_ANNOTATION: "t2"}),
    ],
    ids=lambda body: body["metadata"]["name"],
)
def test_anything_else_has_not(body: dict[str, Any]) -> None:
    assert not settled(body)


def test_a_recreate_answered_has_settled() -> None:
    answered = {RECONCILE_REQUEST_ANNOTATION: "t2", RECONCILE_HANDLED_ANNOTATION: "t2"}
    assert settled(proxy("recreated", annotations=answered))


def test_unsettled_names_them_in_order() -> None:
    bodies = [proxy("b", provisioned=None), proxy("up"), proxy("a", ("False", "TransientError"))]
    assert unsettled(bodies) == [("ns", "a"), ("ns", "b")]


class Gate:
    """Closed for the first `closed` answers, open after."""

    def __init__(self, closed: int) -> None:
        self.closed = closed
        self.asked = 0

    async def __call__(self) -> str | None:
        self.asked += 1
        return "another replica is at work" if self.asked <= self.closed else None


async def wait_out(clock: ManualClock, task: asyncio.Task[str | None]) -> str | None:
    while not task.done():
        await asyncio.sleep(0)
        if clock.next_wake is not None:
            clock.advance(clock.next_wake - clock.monotonic())
    return task.result()


async def test_the_replica_at_work_goes_on_at_once() -> None:
    gate = Gate(closed=0)
    assert await standing_by(gate, ManualClock(), patience=5) is None
    assert gate.asked == 1


async def test_a_replica_just_started_waits_for_its_gate_to_open() -> None:
    clock, gate = ManualClock(), Gate(closed=3)
    answer = await wait_out(clock, asyncio.create_task(standing_by(gate, clock, patience=5)))
    assert answer is None
    assert gate.asked == 4
    assert clock.monotonic() < 5


async def test_a_standby_says_why_once_its_patience_is_out() -> None:
    clock, gate = ManualClock(), Gate(closed=1000)
    answer = await wait_out(clock, asyncio.create_task(standing_by(gate, clock, patience=5)))
    assert answer == "another replica is at work"
    assert clock.monotonic() >= 5


def test_standing_by_is_said_once_per_proxy_at_info(caplog: pytest.LogCaptureFixture) -> None:
    standing = Standing()
    with caplog.at_level(logging.DEBUG, logger="egress_proxies.proxies.standby"):
        for _ in range(3):  # kopf retries a refused handler every few seconds
            standing.refused("ns", "a", "op-b has a higher priority")
        standing.refused("ns", "b", "op-b has a higher priority")
        standing.handled("ns", "a")  # it worked on it since
        standing.refused("ns", "a", "op-c has a higher priority")
    assert [(r.levelno, r.getMessage()) for r in caplog.records] == [
        (logging.INFO, "ns/a: standing by: op-b has a higher priority"),
        (logging.INFO, "ns/b: standing by: op-b has a higher priority"),
        (logging.INFO, "ns/a: standing by: op-c has a higher priority"),
    ]
    assert repr(standing) == "<Standing [proxies: 2]>"


def test_kopf_s_error_line_for_a_standing_by_retry_is_dropped() -> None:
    def record(message: str) -> logging.LogRecord:
        return logging.LogRecord("kopf.objects", logging.ERROR, "", 0, message, None, None)

    refused = "Handler 'reconcile' failed temporarily: standing by: op-b has a higher priority"
    assert not QUIET_STANDBY.filter(record(refused))
    assert QUIET_STANDBY.filter(record("Handler 'reconcile' failed temporarily: boom"))
