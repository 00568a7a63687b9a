"""Retry timing: exponential backoff with jitter, capped, and the instance start deadlines.

Pure. The jitter is derived from the Proxy's UID and the failure count, so a
decision is reproducible (and unit-testable) while Proxies that failed
together still spread their retries apart.
"""

from __future__ import annotations

import datetime
import hashlib
from dataclasses import dataclass

DEFAULT_BASE = datetime.timedelta(seconds=5)
DEFAULT_CAP = datetime.timedelta(minutes=5)
DEFAULT_FAILURE_WINDOW = datetime.timedelta(minutes=10)
DEFAULT_START_TIMEOUT = datetime.timedelta(seconds=60)
DEFAULT_READY_TIMEOUT = datetime.timedelta(minutes=5)
JITTER = 0.2  # each delay is scaled by a factor in [1 - JITTER, 1 + JITTER)


@dataclass(frozen=True)
class RetryPolicy:
    """When to retry a failed Proxy, and how long an instance may take to start.

    The n-th failure in a row waits `base * 2**(n-1)` (jittered), at most
    `cap`. Failures more than `failure_window` apart start the count again.
    An instance stuck in a state it cannot leave on its own (image pull
    error, crash loop, unschedulable) fails after `start_timeout`; one that
    is merely not ready yet fails after `ready_timeout`.
    """

    base: datetime.timedelta = DEFAULT_BASE
    cap: datetime.timedelta = DEFAULT_CAP
    failure_window: datetime.timedelta = DEFAULT_FAILURE_WINDOW
    start_timeout: datetime.timedelta = DEFAULT_START_TIMEOUT
    ready_timeout: datetime.timedelta = DEFAULT_READY_TIMEOUT

    def delay(self, failures: int, seed: str) -> float:
        """Seconds to wait after the `failures`-th failure in a row (1-based)."""
        exponent = max(0, failures - 1)
        raw = min(self.cap.total_seconds(), self.base.total_seconds() * 2.0 ** min(exponent, 32))
        digest = hashlib.sha256(f"{seed}:{failures}".encode()).digest()
        fraction = int.from_bytes(digest[:4], "big") / 2**32
        return min(self.cap.total_seconds(), raw * (1 - JITTER + 2 * JITTER * fraction))


DEFAULT_POLICY = RetryPolicy()
