"""The operator stops its producers before it closes what they use (`Operator.run`).

kopf is replaced by a stand-in that runs until the stop flag; everything else
is the real composition root, against an API server address where nothing
listens (no cluster is needed to watch the order of a shutdown).
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import kopf
import pytest

from egress_proxies.errors import ClosedError
from egress_proxies.operator.process import Operator
from egress_proxies.settings import RunSettings
from egress_proxies.stacks.runner import RunnerSettings, StackRunner
from egress_proxies.stacks.worker import StackWorker
from harness.cluster import wait_for

pytestmark = pytest.mark.integration


def recorded(events: list[str], name: str, close: Callable[[], Awaitable[None]]) -> Any:
    async def closing() -> None:
        events.append(f"{name} closed")
        await close()

    return closing


def until_cancelled(events: list[str], name: str) -> Any:
    async def run() -> None:
        try:
            await asyncio.Event().wait()
        finally:
            events.append(f"{name} stopped")

    return run


async def test_producers_stop_before_the_client_runner_and_state_dir_close(
    offline_operator_settings: RunSettings, monkeypatch: pytest.MonkeyPatch
) -> None:
    events: list[str] = []

    async def kopf_stand_in(*, stop_flag: asyncio.Future[None], **_: Any) -> None:
        events.append("kopf started")
        await stop_flag
        events.append("kopf stopped")

    monkeypatch.setattr(kopf, "operator", kopf_stand_in)
    operator = Operator(
        offline_operator_settings.model_copy(
            update={"discovery_host": "127.0.0.1", "discovery_port": 0, "metrics_port": 0}
        ),
        passphrase="p",
    )
    monkeypatch.setattr(operator.sweeper, "run", until_cancelled(events, "orphan GC"))
    monkeypatch.setattr(operator.health_pump, "run", until_cancelled(events, "status pump"))
    monkeypatch.setattr(operator.client, "close", recorded(events, "client", operator.client.close))
    monkeypatch.setattr(operator.runner, "close", recorded(events, "runner", operator.runner.close))
    release = operator.claim.release

    def releasing() -> None:
        events.append("state dir released")
        release()

    monkeypatch.setattr(operator.claim, "release", releasing)
    stop = asyncio.Event()
    running = asyncio.create_task(operator.run(stop))
    await wait_for(lambda: _ready(events), timeout=30, interval=0.05)
    stop.set()
    await running

    assert events.index("kopf stopped") < events.index("orphan GC stopped")
    last_producer = max(events.index("orphan GC stopped"), events.index("status pump stopped"))
    assert last_producer < events.index("client closed")
    assert events[-3:] == ["client closed", "runner closed", "state dir released"]
    with pytest.raises(ClosedError):
        await operator.client.get("/readyz")


async def _ready(events: list[str]) -> bool:
    return "kopf started" in events


async def test_a_kept_alive_discovery_connection_ends_before_kopf_would_cancel_it(
    offline_operator_settings: RunSettings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """kopf, once its own tasks stop, waits 5 s for every task created after it
    started and then cancels them: an HTTP connection's task among them, a lease
    granted on it just then lost its answer. The stand-in does what kopf does
    to the discovery API's connections and records those it would cancel."""
    cancelled: list[str] = []
    started: list[bool] = []

    async def kopf_stand_in(*, stop_flag: asyncio.Future[None], **_: Any) -> None:
        before = asyncio.all_tasks()
        started.append(True)
        await stop_flag
        connections = [
            task
            for task in asyncio.all_tasks() - before
            if "RequestHandler" in task.get_coro().__qualname__  # type: ignore[union-attr]
        ]
        if connections:  # kopf's run_tasks: wait 5 s for them, then cancel those left
            _done, left = await asyncio.wait(connections, timeout=5)
            cancelled.extend(task.get_name() for task in left)

    monkeypatch.setattr(kopf, "operator", kopf_stand_in)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    operator = Operator(
        offline_operator_settings.model_copy(
            update={"discovery_host": "127.0.0.1", "discovery_port": port, "metrics_port": 0}
        ),
        passphrase="p",
    )
    stop = asyncio.Event()
    running = asyncio.create_task(operator.run(stop))
    await wait_for(lambda: _some(started), timeout=30, interval=0.05)
    async with aiohttp.ClientSession() as session:
        async with session.get(f"http://127.0.0.1:{port}/healthz") as answer:
            assert answer.status == 200
        stop.set()  # the connection stays open, kept alive by the session
        await running
    assert cancelled == [], "kopf would have cancelled the discovery API's connections"


async def _some(items: list[bool]) -> bool:
    return bool(items)


async def test_a_closed_stack_worker_starts_no_new_process(tmp_path: Path) -> None:
    worker = StackWorker(RunnerSettings(state_dir=tmp_path, passphrase="p", worker_idle=30.0))
    await worker.close()
    with pytest.raises(ClosedError, match="the stack worker is closed"):
        await worker.call("destroy", "some.stack")
    assert worker.started == 0


async def test_a_closed_stack_runner_refuses_new_operations(tmp_path: Path) -> None:
    runner = StackRunner(RunnerSettings(state_dir=tmp_path, passphrase="p"))  # its own threads
    await runner.close()
    with pytest.raises(ClosedError, match="the stack runner is closed"):
        await runner.destroy("some.stack")
