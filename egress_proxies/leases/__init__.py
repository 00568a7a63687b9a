"""The lease and cooldown store behind the discovery API (seed section 7)."""
