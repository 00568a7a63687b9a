"""Test and benchmark harness: real processes (dev cluster, operator, squid, origins).

Shared by `tests/` and `bench/` so that neither imports the other; not part of
the shipped package.
"""
