"""The process that hosts the controllers: composition root, peering, shards, state dir.

The controllers themselves live beside it: `egress_proxies.proxies` (one Proxy)
and `egress_proxies.pools` (one ProxyPool); see docs/operator.md.
"""
