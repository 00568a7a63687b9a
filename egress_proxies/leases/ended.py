"""Ended leases, remembered for one cooldown window so that a late report still lands.

Leases end in time order: a release ends one now, an expiry at its deadline, and
every store operation first ends all that are due. So they are kept in the order
they ended and forgotten from the front, with no heap and nothing allocated per
lease but its slot in a dict, in a deque of ids and in an array of the times
they are forgotten at. At a few thousand leases a second the window holds
hundreds of thousands of them, so each byte kept per lease counts (248 bytes a
released lease, 412 with a heap entry each; tests/leases/test_ended_leases.py).

Should the clock step backwards, a lease ended after the step is forgotten
only once those ended before it are: a late report on it lands for up to the
step longer than a window. Nothing else depends on the order.
"""

from __future__ import annotations

from array import array
from collections import deque

from egress_proxies.catalog import ProxyKey
from egress_proxies.leases.lease import Lease, LeaseId

# Forgotten slots at the front of the array are dropped once they are this many
# and at least half of it (amortised O(1) per lease).
_COMPACT_AFTER = 4096


class EndedLeases:
    """The leases that ended less than `window` seconds ago, by id."""

    def __init__(self, window: float) -> None:
        self._window = window
        self._leases: dict[LeaseId, Lease] = {}
        self._ids: deque[LeaseId] = deque()
        self._forget_at = array("d")
        self._head = 0  # the array's first slot still in use

    def __len__(self) -> int:
        return len(self._leases)

    def __repr__(self) -> str:
        return f"<EndedLeases [remembered: {len(self._leases)}, window: {self._window:g} s]>"

    def add(self, lease: Lease, ended_at: float) -> None:
        """Remember `lease`, which ended at `ended_at` (not before the last one added)."""
        self._leases[lease.lease_id] = lease
        self._ids.append(lease.lease_id)
        self._forget_at.append(ended_at + self._window)

    def get(self, lease_id: LeaseId) -> Lease | None:
        """The lease if it ended less than a window ago (as of the last `forget_due`)."""
        return self._leases.get(lease_id)

    def forget_due(self, now: float) -> None:
        """Forget the leases that ended a window or more before `now`."""
        forget_at, head = self._forget_at, self._head
        end = len(forget_at)
        if head == end or forget_at[head] > now:
            return
        ids, leases = self._ids, self._leases
        while head < end and forget_at[head] <= now:
            leases.pop(ids.popleft(), None)  # gone already if its proxy was forgotten
            head += 1
        if head == end:
            del forget_at[:]
            head = 0
        elif head >= _COMPACT_AFTER and 2 * head >= end:
            del forget_at[:head]
            head = 0
        self._head = head

    def forget_proxy(self, key: ProxyKey) -> None:
        """Forget every remembered lease on the proxy `key` (it is gone)."""
        for lease_id in [i for i, lease in self._leases.items() if lease.proxy.key == key]:
            del self._leases[lease_id]
