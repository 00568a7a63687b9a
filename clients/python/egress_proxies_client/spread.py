"""One domain's requests spread over several leases: which lease sends next, when to lease
another, which to give back. Pure decisions over the leases' next turns and a clock.

A request goes through the lease whose next turn comes first. The spread grows by
one lease when even that turn is not now (every lease is busy at its pace), up to
`most` leases (None: as many as the API grants), unless the site refused a request
lately or the API had no free proxy (then not before `grow_after`). A lease unused
for `idle` seconds is given back, so a domain that went quiet holds no proxy.

Another crawler waiting for the domain (its pace says how many leases the
waiting crawler holds) takes a lease from a spread holding more than one more
than that: one is given back, at most one per `YIELD_EVERY` seconds (the time
the news takes to reach every lease's pace), and the spread leases no more for
`YIELD_HOLD` seconds. Crawlers sharing a fleet so settle at equal shares.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Generic, Protocol, TypeVar


class Paced(Protocol):
    """What the spread needs of a lease."""

    @property
    def lease_id(self) -> str:
        """The lease's id."""
        ...

    def next_turn(self) -> float:
        """Seconds until the lease's next turn."""
        ...

    def waiting_held(self) -> int | None:
        """The leases of another crawler waiting for the domain (None: nobody waits)."""
        ...


L = TypeVar("L", bound=Paced)

# A waiting crawler is heard of through each lease's next report (every second), and
# it asks again within 3 s: one lease given back per this long, on news of that age.
YIELD_EVERY = 3.0
# After giving a lease back the spread leases no more for this long, so the waiting
# crawler gets it and the two do not trade it back and forth.
YIELD_HOLD = 10.0


@dataclass
class DomainSpread(Generic[L]):
    """The leases carrying one domain's requests."""

    most: int | None
    idle: float
    leases: list[L] = field(default_factory=list)
    grow_after: float = 0.0
    _used_at: dict[str, float] = field(default_factory=dict)
    _yield_after: float = 0.0

    def __repr__(self) -> str:
        most = "any" if self.most is None else self.most
        return f"<DomainSpread [leases: {len(self.leases)}/{most}]>"

    def best(self) -> L | None:
        """The lease whose next turn comes first; None without leases."""
        return min(self.leases, key=lambda lease: lease.next_turn(), default=None)

    def should_grow(self, best: L | None, now: float) -> bool:
        """True when another lease would send sooner than `best` and may be asked for."""
        if best is None:
            return True
        room = self.most is None or len(self.leases) < self.most
        return room and now >= self.grow_after and best.next_turn() > 0

    def add(self, lease: L, now: float) -> None:
        """A new lease joins the spread."""
        self.leases.append(lease)
        self._used_at[lease.lease_id] = now

    def used(self, lease: L, now: float) -> None:
        """A request goes through `lease` now."""
        self._used_at[lease.lease_id] = now

    def hold_back(self, until: float) -> None:
        """Lease no more before `until` (a refusal or a 409 said to slow down)."""
        self.grow_after = max(self.grow_after, until)

    def remove(self, lease_id: str) -> L | None:
        """Take a lease out of the spread (it ended or was refused); the lease, if it was in."""
        for index, lease in enumerate(self.leases):
            if lease.lease_id == lease_id:
                self._used_at.pop(lease_id, None)
                return self.leases.pop(index)
        return None

    def yielded(self, now: float) -> L | None:
        """Take out and return a lease for a waiting crawler holding fewer than all but one
        of ours (the newest lease); None when nobody waits or the shares are even."""
        if now < self._yield_after or not self.leases:
            return None
        waiting = [held for lease in self.leases if (held := lease.waiting_held()) is not None]
        if not waiting or len(self.leases) <= min(waiting) + 1:
            return None
        self._yield_after = now + YIELD_EVERY
        self.hold_back(now + YIELD_HOLD)
        lease = self.leases[-1]
        self.remove(lease.lease_id)
        return lease

    def idle_leases(self, now: float) -> list[L]:
        """Take out and return the leases nobody used for `idle` seconds."""
        idle = [
            lease
            for lease in self.leases
            if now - self._used_at.get(lease.lease_id, now) >= self.idle
        ]
        for lease in idle:
            self.remove(lease.lease_id)
        return idle
