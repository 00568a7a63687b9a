"""`egress-proxies discovery`: the discovery + lease API as its own, replicated process.

It reads the fleet from the Proxies' status (and their credentials Secrets)
through list+watch reflectors (`sinks.py` writes them into a `Fleet`) and the
leases from a shared store, so any number of replicas serve the same fleet
and the same leases. `app.py` is its composition root.
"""
