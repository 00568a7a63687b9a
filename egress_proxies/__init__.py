"""egress-proxies: a Kubernetes operator running healthy egress proxies for web crawlers."""

__all__ = ["__version__"]

__version__ = "0.1.0"
