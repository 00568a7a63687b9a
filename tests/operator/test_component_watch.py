"""A component that should run forever ends: the operator stops, failed, instead of limping on."""

from __future__ import annotations

import asyncio
import logging

import pytest

from egress_proxies.operator.process import Operator

pytestmark = pytest.mark.unit


def bare_operator() -> Operator:
    operator = Operator.__new__(Operator)  # only the watch is under test, not the wiring
    operator.failed = False
    return operator


async def crash() -> None:
    raise RuntimeError("dictionary changed size during iteration")


async def test_a_crashed_component_stops_the_operator_loudly(
    caplog: pytest.LogCaptureFixture,
) -> None:
    operator, stop = bare_operator(), asyncio.Event()
    task = asyncio.create_task(crash(), name="health engine")
    await asyncio.gather(task, return_exceptions=True)
    with caplog.at_level(logging.ERROR):
        operator._component_ended(task, stop)
    assert stop.is_set()
    assert operator.failed
    assert "health engine stopped unexpectedly" in caplog.text
    assert "dictionary changed size" in caplog.text


async def test_cancellation_at_shutdown_is_not_a_failure() -> None:
    operator, stop = bare_operator(), asyncio.Event()
    task = asyncio.create_task(asyncio.sleep(60), name="orphan GC")
    await asyncio.sleep(0)
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    operator._component_ended(task, stop)
    assert not stop.is_set()
    assert not operator.failed
