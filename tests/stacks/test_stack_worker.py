"""The stack worker process: real pulumi runs in it, it is retired and replaced, its death fails
only what it had in flight (`stacks.worker`)."""

from __future__ import annotations

import asyncio
import functools
import os
import secrets
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pulumi
import pytest

from egress_proxies import toolchain
from egress_proxies.clock import ManualClock
from egress_proxies.stacks.runner import RunnerSettings, StackOperationError, StackRunner

pytestmark = pytest.mark.integration


def settings(tmp_path: Path, **worker: float) -> RunnerSettings:
    return RunnerSettings(
        state_dir=tmp_path / "state",
        passphrase=secrets.token_urlsafe(16),
        pulumi_root=toolchain.cache_dir(),
        extra_env={"PATH": str(toolchain.bin_dir())},
        worker_idle=worker.get("idle", 60.0),
        worker_operations=int(worker.get("operations", 200)),
    )


@pytest.fixture
async def runner(tmp_path: Path) -> AsyncIterator[StackRunner]:
    runner = StackRunner(settings(tmp_path))
    try:
        yield runner
    finally:
        await runner.close()


def exporting_program(value: str) -> None:
    """Exports `value` and the worker's pid (a module-level function: it pickles)."""
    pulumi.export("value", value)
    pulumi.export("pid", os.getpid())


def sleeping_program(marker: str) -> None:
    """Says it has started, then outlasts any test."""
    Path(marker).write_text(str(os.getpid()))
    time.sleep(600)


def gated_program(marker: str, gate: str) -> None:
    """Says it has started, waits until `gate` exists, then exports."""
    Path(marker).write_text(str(os.getpid()))
    while not Path(gate).exists():
        time.sleep(0.05)
    pulumi.export("value", "finished")


def alive(pid: int) -> bool:
    """Running, not a zombie nobody has reaped yet."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                status = (entry / "status").read_text()
            except OSError:
                continue
            if f"\nPPid:\t{pid}\n" in status:
                found.append(int(entry.name))
    return found


async def test_an_up_runs_in_the_worker_and_its_outputs_come_back(runner: StackRunner) -> None:
    outputs = await runner.up("worker.one", "uid-1", functools.partial(exporting_program, "hi"))
    assert runner.worker is not None
    assert outputs["value"] == "hi"
    assert outputs["pid"] in runner.worker.pids  # not the operator's own process
    assert outputs["pid"] != os.getpid()
    await runner.destroy("worker.one")
    assert await runner.state("worker.one") is None


async def test_an_idle_worker_exits_and_the_next_operation_starts_another(tmp_path: Path) -> None:
    clock = ManualClock()
    runner = StackRunner(settings(tmp_path, idle=60.0), clock)
    try:
        assert runner.worker is not None
        await runner.destroy("worker.absent")  # no stack: no pulumi process, only the worker
        [first] = runner.worker.pids
        for _ in range(1000):
            if clock.sleepers:
                break
            await asyncio.sleep(0)
        clock.advance(59.9)
        await asyncio.sleep(0.2)
        assert runner.worker.pids == [first], "retired only after `worker_idle` on its clock"
        clock.advance(0.1)
        for _ in range(100):
            if not runner.worker.pids:
                break
            await asyncio.sleep(0.05)
        assert runner.worker.pids == []
        assert not alive(first)
        await runner.destroy("worker.absent")
        [second] = runner.worker.pids
        assert second != first
        assert runner.worker.started == 2
    finally:
        await runner.close()
    assert runner.worker.pids == []


async def test_a_worker_is_replaced_after_its_operations(tmp_path: Path) -> None:
    runner = StackRunner(settings(tmp_path, operations=2))
    try:
        assert runner.worker is not None
        await asyncio.gather(runner.forget("worker.a"), runner.forget("worker.b"))
        await runner.forget("worker.c")
        assert runner.worker.started == 2
        assert len(runner.worker.pids) == 1  # the first one finished its two and exited
    finally:
        await runner.close()


async def test_a_program_that_does_not_pickle_is_refused_alone(runner: StackRunner) -> None:
    def closure() -> None:
        pulumi.export("value", "never")

    with pytest.raises(TypeError, match="module-level function"):
        await runner.up("worker.closure", "uid-1", closure)
    outputs = await runner.up("worker.two", "uid-2", functools.partial(exporting_program, "ok"))
    assert outputs["value"] == "ok"
    await runner.destroy("worker.two")


async def test_a_worker_killed_mid_up_fails_that_up_and_the_next_one_runs(
    runner: StackRunner, tmp_path: Path
) -> None:
    marker = tmp_path / "started"
    slow = asyncio.create_task(
        runner.up("worker.slow", "uid-3", functools.partial(sleeping_program, str(marker)))
    )
    for _ in range(600):
        if marker.exists() or slow.done():
            break
        await asyncio.sleep(0.1)
    assert marker.exists(), "the program started in the worker"
    worker_pid = int(marker.read_text())
    cli = children(worker_pid)  # the pulumi CLI of this up
    assert cli, "the worker runs pulumi as its child"
    os.kill(worker_pid, 9)
    with pytest.raises(
        StackOperationError, match=f"worker process {worker_pid} exited with code -9"
    ):
        await slow
    # Its pulumi CLI loses the language host and ends too: nothing is left behind.
    for _ in range(300):
        if not any(alive(pid) for pid in cli):
            break
        await asyncio.sleep(0.1)
    assert not any(alive(pid) for pid in cli)
    outputs = await runner.up("worker.three", "uid-4", functools.partial(exporting_program, "x"))
    assert outputs["value"] == "x"
    assert outputs["pid"] != worker_pid
    await runner.destroy("worker.three")


async def test_an_up_in_flight_finishes_on_close_though_its_reader_was_cancelled(
    tmp_path: Path,
) -> None:
    """kopf, stopping, cancels every task made after it started: the caller and the reader."""
    configured = settings(tmp_path)
    runner = StackRunner(configured)
    marker, gate = tmp_path / "started", tmp_path / "gate"
    program = functools.partial(gated_program, str(marker), str(gate))
    up = asyncio.create_task(runner.up("worker.gated", "uid-gated", program))
    for _ in range(1200):
        if marker.exists():
            break
        await asyncio.sleep(0.05)
    assert marker.exists(), "the up started"
    assert runner.worker is not None
    [pid] = runner.worker.pids
    readers = [t for t in asyncio.all_tasks() if t.get_name().startswith("stack-worker-")]
    assert readers
    for task in [up, *readers]:
        task.cancel()
    await asyncio.gather(up, *readers, return_exceptions=True)
    gate.touch()
    await runner.close()  # raises nothing, and waits for the up in flight
    assert runner.worker.pids == []
    assert not alive(pid)
    state = await StackRunner(configured).state("worker.gated")
    assert state is not None and state.outputs["value"] == "finished"
