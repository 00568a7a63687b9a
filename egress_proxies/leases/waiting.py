"""Crawlers waiting for a target: the last one refused a lease for it, and how many it holds.

A crawler asking for a lease says how many it already holds for the target
(`held`). When it is refused (409: no free proxy, or the target full), the
pace handed to every holder of the target says so for `WAITING_WINDOW`
seconds (`Pace.waiting_held`), and a holder with more than one lease more
than the waiting crawler gives one back: crawlers sharing a fleet converge to
equal shares without being told how many they are. A refused crawler whose
target others hold more leases of than it does (more than `held` + 1) is told
to ask again within `CONTENDED_RETRY` seconds, not when the first lease ends:
a lease is about to be given back.
"""

from __future__ import annotations

from dataclasses import dataclass, field

# A refusal says someone waits for this long: the waiting crawler asks again within it.
WAITING_WINDOW = 3.0
# How soon a crawler refused while others hold more of its target asks again.
CONTENDED_RETRY = 2.0
# Targets remembered at most (stale ones are dropped first; then all, rather than grow).
_MOST_TARGETS = 10_000


def contended_retry(retry_after: float | None, target_leases: int, held: int) -> float | None:
    """The Retry-After of a refusal: at most CONTENDED_RETRY when others hold more of the
    target than one more than the refused crawler, who should get one of them soon."""
    if target_leases <= held + 1:
        return retry_after
    return CONTENDED_RETRY if retry_after is None else min(retry_after, CONTENDED_RETRY)


@dataclass
class Waiting:
    """The last refused crawler per target, in one process (the memory store's lock guards it)."""

    _last: dict[str, tuple[int, float]] = field(default_factory=dict)

    def refused(self, target: str, held: int, now: float) -> None:
        """A crawler holding `held` leases for `target` was refused one now."""
        if len(self._last) >= _MOST_TARGETS:
            self._last = {t: v for t, v in self._last.items() if now - v[1] < WAITING_WINDOW}
            if len(self._last) >= _MOST_TARGETS:
                self._last.clear()
        self._last[target] = (held, now)

    def held_by_waiting(self, target: str | None, now: float) -> int | None:
        """What the crawler refused for `target` within the window holds; None: nobody waits."""
        if target is None:
            return None
        last = self._last.get(target)
        if last is None or now - last[1] >= WAITING_WINDOW:
            return None
        return last[0]
