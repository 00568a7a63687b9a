"""The pool tests' fixtures: the lease stores' (virtual time, a store of each kind on it)."""

from tests.leases.lease_stores import clock, make_store

__all__ = ["clock", "make_store"]
