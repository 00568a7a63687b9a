"""The benchmarks' kit: what more than one benchmark in `bench/` uses.

No benchmark imports another; `make lint` holds them to that.
"""
