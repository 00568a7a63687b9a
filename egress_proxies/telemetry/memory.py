"""Allocation snapshots on demand, for finding what each Proxy costs in memory.

With `EGRESS_PROXIES_TRACEMALLOC_DIR` set, the operator starts tracemalloc
(25 frames) and writes a snapshot there on each SIGUSR2, named by a running
count. `bench.memory` diffs them by allocation site. Off by default:
tracemalloc roughly doubles the memory it watches.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import signal
import tracemalloc
from collections.abc import Mapping
from pathlib import Path

logger = logging.getLogger(__name__)

ENV = "EGRESS_PROXIES_TRACEMALLOC_DIR"
_FRAMES = 25


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
