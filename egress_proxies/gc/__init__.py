"""The orphan garbage collector: stack state vs Proxies vs tagged instances."""
