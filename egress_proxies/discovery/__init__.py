"""The discovery + lease HTTP API for crawlers (seed section 7)."""
