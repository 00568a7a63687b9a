"""The health engine: probes every proxy through the proxy (seed section 6)."""
