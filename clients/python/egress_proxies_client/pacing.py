"""The pace a lease is handed, the token bucket that keeps to it, the batch of ok counts, and
the count of what the site accepted over the last second.

Pure bookkeeping over a clock the caller passes in: no sleeping, no I/O, so the
sync and async faces share it and tests drive it in virtual time.
"""

from __future__ import annotations

import math
import threading
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime


@dataclass(frozen=True)
class Pace:
    """How fast to send through a lease's proxy to its target, as the API handed it out.

    `waiting_held`: another crawler was refused a lease for the target lately while
    holding this many for it (None: nobody waits); a holder of more than one more
    than that should give one back.
    """

    requests_per_second: float
    burst: int
    last_lowered_at: datetime | None
    waiting_held: int | None = None


# Tokens counted up after waiting exactly the time they take can fall short by a rounding.
_ROUNDING = 1e-9
# A turn taken late (the caller woke late: a busy event loop, a busy machine) is made up
# for, by up to this many seconds at the pace: a bucket holding exactly its burst loses
# every turn's lateness, and a loaded machine's few milliseconds a turn were 5 % of 19/s.
# In any second the bucket then lets burst + rate x (1 + CATCH_UP) requests through: with
# burst 1 and a pace 5 % below a site's limit (the server's cruise), within the limit + 1
# that a site counting a sliding second allows while CATCH_UP < 1/0.95 - 1 (53 ms), the
# margin that absorbs the network's jitter too: 10 ms makes up for most lateness (a few
# milliseconds a turn) and leaves the network 42 ms (with 20 ms, a crawl of 30 slow
# sites whose process stalled now and then had twice the 429s of one without it).
CATCH_UP = 0.01


class TokenBucket:
    """`burst` tokens refilled at `rate` per second; each request takes one. It holds
    CATCH_UP seconds' worth more, so a turn taken late is made up for.

    A turn is taken only when a token is there now (`take`); a caller that finds
    none waits the seconds `take` returns and asks again, so a new pace (or a
    pause) applies at once to everyone still waiting, and no turn is promised at
    a pace that has since been lowered. `next_turn` estimates the wait of one more
    caller behind those already waiting (`waiting`), so callers choosing among
    leases spread over them. `pause(seconds)` (a site's Retry-After) gives no turn
    before it has passed. Without a pace every turn is now. Locked: threads of
    one sync lease may share it.
    """

    def __init__(self, pace: Pace | None, now: float) -> None:
        self._lock = threading.Lock()
        self._rate = math.inf
        self._burst = 1.0
        self._capacity = 1.0  # the burst and CATCH_UP seconds' worth
        self._tokens = 1.0
        self._stamp = now  # tokens are counted up to here; later while paused
        self._waiting = 0
        self.set_pace(pace, now)

    def __repr__(self) -> str:
        pace = "unpaced" if math.isinf(self._rate) else f"{self._rate:g}/s, burst {self._burst:g}"
        return f"<TokenBucket [{pace} | tokens: {self._tokens:.2f} | waiting: {self._waiting}]>"

    @property
    def rate(self) -> float:
        """Requests per second (infinite without a pace)."""
        return self._rate

    def set_pace(self, pace: Pace | None, now: float) -> None:
        """Keep to a new pace from `now` (tokens earned at the old one are kept, up to burst)."""
        with self._lock:
            self._refill(now)
            if pace is None:
                self._rate, self._burst, self._capacity = math.inf, 1.0, 1.0
            else:
                self._rate, self._burst = pace.requests_per_second, float(max(pace.burst, 1))
                self._capacity = self._burst + CATCH_UP * self._rate
            self._tokens = min(self._tokens, self._capacity)

    def take(self, now: float) -> float:
        """Take a turn if one is free now (0.0); else the seconds until one may be."""
        with self._lock:
            self._refill(now)
            wait = self._wait(now, self._tokens, 1.0)
            if wait == 0 and not math.isinf(self._rate):
                self._tokens -= 1
            return wait

    @contextmanager
    def waiting(self) -> Iterator[None]:
        """Count the caller among those waiting for a turn while inside."""
        with self._lock:
            self._waiting += 1
        try:
            yield
        finally:
            with self._lock:
                self._waiting -= 1

    def next_turn(self, now: float) -> float:
        """The wait of one more caller, behind those already waiting (0: a turn is free now)."""
        with self._lock:
            tokens = self._tokens
            if now > self._stamp and not math.isinf(self._rate):
                tokens = min(self._capacity, tokens + (now - self._stamp) * self._rate)
            return self._wait(now, tokens, 1.0 + self._waiting)

    def pause(self, seconds: float, now: float) -> None:
        """No turn for `seconds` (a site's Retry-After), then one at once, then the pace."""
        with self._lock:
            self._refill(now)
            until = now + seconds
            if until > self._stamp:
                self._stamp = until
                self._tokens = min(self._tokens, 1.0)

    def _wait(self, now: float, tokens: float, needed: float) -> float:
        wait = max(self._stamp - now, 0.0)
        if not math.isinf(self._rate) and tokens < needed - _ROUNDING:
            wait += (needed - tokens) / self._rate
        return wait

    def _refill(self, now: float) -> None:
        if now <= self._stamp:
            return
        if math.isinf(self._rate):
            self._tokens = self._burst
        else:
            self._tokens = min(self._capacity, self._tokens + (now - self._stamp) * self._rate)
        self._stamp = now


class OkBatch:
    """Requests the site accepted, not yet reported: sent every `interval` or `size` of them,
    and the lease's first at once (the server's slow start counts it as seconds of traffic
    at the start pace: reported at once, it starts the lease's climb a second sooner)."""

    def __init__(self, interval: float, size: int) -> None:
        if interval <= 0 or size < 1:
            raise ValueError("report batches need a positive interval and size")
        self.interval = interval
        self.size = size
        self._lock = threading.Lock()
        self._count = 0
        self._since: float | None = None  # when the last batch went; None: none yet

    def __repr__(self) -> str:
        return f"<OkBatch [pending: {self._count}]>"

    def add(self, count: int = 1) -> bool:
        """Count accepted requests; True when the batch should go now (full, or the first)."""
        with self._lock:
            self._count += count
            return self._count >= self.size or self._since is None

    def take(self, now: float, *, force: bool = False) -> int:
        """The count to report now (0: nothing due), and start the next batch."""
        with self._lock:
            due = (
                force
                or self._count >= self.size
                or self._since is None
                or now - self._since >= self.interval
            )
            if self._count == 0 or not due:
                return 0
            count, self._count, self._since = self._count, 0, now
            return count

    def put_back(self, count: int) -> None:
        """A report that failed: its count goes with the next one."""
        with self._lock:
            self._count += count


# Sites count their limits over a second: what one accepted over the last second, counted
# when it refuses a request, is the limit it keeps to.
SITE_WINDOW = 1.0
# More accepts than this within one second are counted as this many (memory stays bounded).
_MOST_RECENT = 10_000


class RecentAccepts:
    """When the site accepted the lease's latest requests: `last_second` counts those
    within the second before now, the limit a site counting over a second keeps to."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._times: deque[float] = deque(maxlen=_MOST_RECENT)

    def __repr__(self) -> str:
        return f"<RecentAccepts [{len(self._times)} kept]>"

    def add(self, now: float, count: int = 1) -> None:
        """`count` requests accepted now."""
        with self._lock:
            self._times.extend([now] * min(count, _MOST_RECENT))

    def last_second(self, now: float) -> int:
        """How many were accepted within the second before `now`."""
        with self._lock:
            while self._times and self._times[0] <= now - SITE_WINDOW:
                self._times.popleft()
            return len(self._times)
