"""Keeping the operator's resident memory close to what it holds, and finding what it holds.

glibc gives each thread that allocates its own malloc arena, and the
operator's threads (the stack runner's pool, asyncio's executor) allocate
in bursts: freed memory then stays resident, spread over arenas. The
operator caps the arenas at two, as `MALLOC_ARENA_MAX=2` would.

Freed memory also stays resident inside an arena: glibc returns only the
free space at the top of a heap. A burst of concurrent handlers (a few
hundred Proxies applied at once) opens as many TLS connections to the API
server, each with asyncio's 256 KiB read buffer; once they close, those
buffers are holes between live objects, 100+ KiB per Proxy that nothing
uses. `HeapTrimmer` calls glibc's `malloc_trim(0)` every few seconds, which
releases the free pages inside the heaps too (docs/operator.md "Memory").

With `EGRESS_PROXIES_TRACEMALLOC_DIR` set, the operator starts tracemalloc
(25 frames, or `EGRESS_PROXIES_TRACEMALLOC_FRAMES`: fewer frames slow a busy
operator much less) and writes a snapshot there on each SIGUSR2, named by a running
count. `bench.memory` diffs them by allocation site. Off by default:
tracemalloc roughly doubles the memory it watches.
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import itertools
import logging
import signal
import time
import tracemalloc
from collections.abc import Mapping
from pathlib import Path

from egress_proxies.clock import Clock

logger = logging.getLogger(__name__)

ENV = "EGRESS_PROXIES_TRACEMALLOC_DIR"
FRAMES_ENV = "EGRESS_PROXIES_TRACEMALLOC_FRAMES"
_FRAMES = 25
_M_ARENA_MAX = -8  # glibc's mallopt parameter
MALLOC_ARENAS = 2
TRIM_INTERVAL = 10.0  # seconds


def _libc() -> ctypes.CDLL | None:
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name) if name else None
    except OSError:
        return None
    return libc if libc is not None and hasattr(libc, "malloc_trim") else None


def cap_malloc_arenas() -> bool:
    """Limit glibc to a few malloc arenas (call before threads start); False off glibc."""
    libc = _libc()
    return bool(libc is not None and libc.mallopt(_M_ARENA_MAX, MALLOC_ARENAS))


class HeapTrimmer:
    """Gives the free pages of glibc's heaps back to the kernel every `interval` seconds."""

    def __init__(self, clock: Clock, interval: float = TRIM_INTERVAL) -> None:
        self._clock = clock
        self._interval = interval
        self._libc = _libc()
        self.trims = 0
        self.seconds = 0.0  # spent in malloc_trim, all trims together

    def __repr__(self) -> str:
        if self._libc is None:
            return "<HeapTrimmer [off: not glibc]>"
        return (
            f"<HeapTrimmer [every {self._interval:g} s | trims: {self.trims} | "
            f"{self.seconds * 1000:.0f} ms in all]>"
        )

    def trim(self) -> None:
        """One `malloc_trim(0)` now (a no-op off glibc)."""
        if self._libc is None:
            return
        started = time.perf_counter()
        self._libc.malloc_trim(0)
        self.seconds += time.perf_counter() - started
        self.trims += 1

    async def run(self) -> None:
        """Trim every interval, forever, in a worker thread (the first trim after a burst
        can take a tenth of a second)."""
        while True:
            await self._clock.sleep(self._interval)
            await asyncio.to_thread(self.trim)


def snapshots_on_signal(environ: Mapping[str, str], loop: asyncio.AbstractEventLoop) -> bool:
    """Start tracing and dump a snapshot per SIGUSR2 when the variable is set."""
    directory = environ.get(ENV)
    if not directory:
        return False
    target = Path(directory)
    target.mkdir(parents=True, exist_ok=True)
    tracemalloc.start(int(environ.get(FRAMES_ENV) or _FRAMES))
    counter = itertools.count()

    def dump() -> None:
        path = target / f"snapshot-{next(counter)}.pickle"
        tracemalloc.take_snapshot().dump(str(path))
        logger.info("tracemalloc snapshot written to %s", path)

    loop.add_signal_handler(signal.SIGUSR2, dump)
    return True
