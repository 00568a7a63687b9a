"""How long to wait before asking again after a 409: a pure planner, no sleeping."""

from __future__ import annotations

import random
from dataclasses import dataclass


@dataclass(frozen=True)
class Backoff:
    """Waits after a 409 until a deadline.

    With the server's Retry-After (when the earliest matching proxy may free up) the
    wait is that plus up to `jitter` of it, so crawlers that were refused together do
    not come back together, and never earlier than the server said. Without one
    (nothing matching is healthy) it doubles from `base` up to `cap`, half of it
    random. A wait that would end past the deadline is not started: the caller
    gives up at once rather than sleep for nothing.
    """

    base: float = 0.5
    cap: float = 30.0
    jitter: float = 0.1

    def next_wait(
        self, retry_after: float | None, attempt: int, remaining: float, rng: random.Random
    ) -> float | None:
        """Seconds to sleep before attempt `attempt + 1`, or None to give up now."""
        if retry_after is not None:
            wait = retry_after * (1 + rng.uniform(0, self.jitter))
            if retry_after > remaining:
                return None
            return min(wait, remaining)
        if remaining <= 0:
            return None
        ceiling = min(self.cap, self.base * 2.0**attempt)
        return min(ceiling / 2 + rng.uniform(0, ceiling / 2), remaining)
