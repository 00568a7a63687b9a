"""The heap trimmer hands freed heap pages back to the kernel, every interval, in virtual time."""

from __future__ import annotations

import asyncio
import ctypes.util
import platform
from pathlib import Path

import pytest

from egress_proxies.clock import ManualClock
from egress_proxies.telemetry.memory import HeapTrimmer

pytestmark = pytest.mark.unit

glibc_only = pytest.mark.skipif(
    platform.libc_ver()[0] != "glibc" or not ctypes.util.find_library("c"), reason="glibc only"
)

BUFFER = 256 * 1024  # asyncio's read buffer per TLS connection


def resident_kib() -> int:
    status = Path("/proc/self/status").read_text()
    return int(status.split("VmRSS:")[1].split()[0])


def burst(connections: int) -> list[bytearray]:
    """Buffers as a burst of TLS connections leaves them: freed, with small survivors between."""
    # A freed mapped chunk raises glibc's mmap threshold: later buffers come from the heap.
    first = bytearray(BUFFER)
    del first
    buffers, survivors = [], []
    for _ in range(connections):
        buffer = bytearray(BUFFER)
        buffer[::4096] = b"x" * (BUFFER // 4096)  # touch every page: resident
        buffers.append(buffer)
        survivors.append(bytearray(1024))  # too large for pymalloc: between the buffers
    del buffers
    return survivors


async def wait_for_trims(trimmer: HeapTrimmer, count: int) -> None:
    for _ in range(500):
        if trimmer.trims >= count:
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"{trimmer!r}: expected {count} trims")


@glibc_only
def test_after_a_trim_a_burst_leaves_no_freed_buffer_resident() -> None:
    trimmer = HeapTrimmer(ManualClock())
    before_burst = resident_kib()
    survivors = burst(200)

    trimmer.trim()

    # In a fresh process the buffers are heap holes until the trim; where glibc
    # mapped them instead, they were gone already. Either way none stays.
    assert resident_kib() - before_burst < 200 * BUFFER // 1024 // 2
    assert survivors


@glibc_only
async def test_it_trims_once_per_interval() -> None:
    clock = ManualClock()
    trimmer = HeapTrimmer(clock, interval=10)
    running = asyncio.create_task(trimmer.run())
    try:
        await asyncio.sleep(0)
        clock.advance(9)
        await asyncio.sleep(0.05)
        assert trimmer.trims == 0
        clock.advance(1)
        await wait_for_trims(trimmer, 1)
        clock.advance(10)
        await wait_for_trims(trimmer, 2)
        assert repr(trimmer).startswith("<HeapTrimmer [every 10 s | trims: 2 | ")
    finally:
        running.cancel()
        await asyncio.gather(running, return_exceptions=True)
