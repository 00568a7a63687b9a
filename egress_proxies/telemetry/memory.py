"""Keeping the operator's resident memory close to what it holds, and finding what it holds.

glibc gives each thread that allocates its own malloc arena, and the
operator's threads (the stack runner's pool, asyncio's executor) allocate
in bursts: freed memory then stays resident, spread over arenas. The
operator caps the arenas at two, as `MALLOC_ARENA_MAX=2` would.

With `EGRESS_PROXIES_TRACEMALLOC_DIR` set, the operator starts tracemalloc
(25 frames) and writes a snapshot there on each SIGUSR2, named by a running
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
import tracemalloc
from collections.abc import Mapping
from pathlib import Path

logger = logging.getLogger(__name__)

ENV = "EGRESS_PROXIES_TRACEMALLOC_DIR"
_FRAMES = 25
_M_ARENA_MAX = -8  # glibc's mallopt parameter
MALLOC_ARENAS = 2


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


def snapshots_on_signal(environ: Mapping[str, str], loop: asyncio.AbstractEventLoop) -> bool:
    """Start tracing and dump a snapshot per SIGUSR2 when the variable is set."""
    directory = environ.get(ENV)
    if not directory:
        return False
    target = Path(directory)
    target.mkdir(parents=True, exist_ok=True)
    tracemalloc.start(_FRAMES)
    counter = itertools.count()

    def dump() -> None:
        path = target / f"snapshot-{next(counter)}.pickle"
        tracemalloc.take_snapshot().dump(str(path))
        logger.info("tracemalloc snapshot written to %s", path)

    loop.add_signal_handler(signal.SIGUSR2, dump)
    return True
