"""ProxyPools: fleets of Proxies from a template, scaled, rolled, rotated, drained, autoscaled."""

from egress_proxies.pools.controller import PoolComponents, PoolController
from egress_proxies.pools.demand import DemandBook
from egress_proxies.pools.handlers import register_pools

__all__ = ["DemandBook", "PoolComponents", "PoolController", "register_pools"]
