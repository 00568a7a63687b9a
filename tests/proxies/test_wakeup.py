"""A ring the API server does not answer is tried again, waiting longer each time (`wakeup.py`)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from egress_proxies.clock import ManualClock
from egress_proxies.kube.errors import ConflictError, KubeApiError, TransportError
from egress_proxies.proxies.wakeup import RING_ATTEMPTS, Bell, Reason
from egress_proxies.vocabulary import INSTANCE_STATE_ANNOTATION

pytestmark = pytest.mark.unit


class Flaky:
    """Fails its first `failures` patches with `error`, then records each patch."""

    def __init__(self, failures: int, error: Exception) -> None:
        self.failures = failures
        self.error = error
        self.tries = 0
        self.patched: list[tuple[str, dict[str, Any]]] = []

    async def patch(
        self, path: str, body: dict[str, Any], *, strategic: bool = False
    ) -> dict[str, Any]:
        self.tries += 1
        if self.tries <= self.failures:
            raise self.error
        self.patched.append((path, body))
        return body


async def ring_through(bell: Bell, clock: ManualClock) -> tuple[asyncio.Task[None], list[float]]:
    """Ring on a task, moving the clock past each wait between tries; the task and the waits."""
    ring = asyncio.create_task(bell.ring("crawl", "p1", Reason.INSTANCE, "sig"))
    waits = []
    while not ring.done():
        await asyncio.sleep(0)
        wake = clock.next_wake
        if wake is not None:
            waits.append(wake - clock.monotonic())
            clock.advance(wake - clock.monotonic())
    return ring, waits


@pytest.mark.parametrize(
    "error", [TransportError("connect timeout"), KubeApiError(503, "ServiceUnavailable", "")]
)
async def test_an_unanswered_ring_is_tried_again_with_growing_waits(error: Exception) -> None:
    clock = ManualClock()
    client = Flaky(3, error)
    ring, waits = await ring_through(Bell(client, clock), clock)
    assert ring.result() is None
    assert client.tries == 4
    path, body = client.patched[0]
    assert path.endswith("/proxies/p1")
    assert body == {"metadata": {"annotations": {INSTANCE_STATE_ANNOTATION: "sig"}}}
    assert waits == [0.5, 1.0, 2.0]


async def test_a_ring_gives_up_after_its_attempts() -> None:
    clock = ManualClock()
    client = Flaky(RING_ATTEMPTS, TransportError("connect timeout"))
    ring, _waits = await ring_through(Bell(client, clock), clock)
    with pytest.raises(TransportError):
        ring.result()
    assert client.tries == RING_ATTEMPTS and client.patched == []


async def test_an_answer_that_is_final_is_not_tried_again() -> None:
    clock = ManualClock()
    client = Flaky(1, ConflictError(409, "Conflict", "no"))
    ring, _waits = await ring_through(Bell(client, clock), clock)
    with pytest.raises(ConflictError):
        ring.result()
    assert client.tries == 1
