"""What one proxy carries at once: leases per {proxy, target} pair, not per proxy.

A site limits each source address on its own, and an address can send to many
sites at once, each at its pace: so a proxy carries up to `max_leases` leases
for each target (its holders split the pair's pace), for as many targets at once
as it is asked for, or at most `max_targets` of them when the Proxy says so
(`maxTargets: 1` with `maxLeases: 1` is the exclusive proxy: one lease in all).
A lease without a target is its own pair, one target among the others.
The Redis store keeps the same rule in leases/lua/acquire.lua.
"""

from __future__ import annotations

from egress_proxies.catalog import ProxyRecord


def is_full_for(record: ProxyRecord, pair_leases: int, targets: int) -> bool:
    """True when the proxy takes no more leases for a target it holds `pair_leases` for,
    while it carries leases for `targets` targets (that one included if held)."""
    if pair_leases >= record.max_leases:
        return True
    return pair_leases == 0 and record.max_targets is not None and targets >= record.max_targets
