"""The lease store tests' fixtures: virtual time, and a store of each kind (memory, Redis) on it."""

from tests.leases.lease_stores import clock, make_store

__all__ = ["clock", "make_store"]
