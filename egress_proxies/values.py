"""Value types shared across layers: a proxy's identity and its credentials.

They sit with the model (the bottom layer) so that the catalog, the health
engine, the lease store and the inline programs can all name a proxy and its
credentials without importing one another (see docs/architecture.md, Layers).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NewType

ProxyKey = NewType("ProxyKey", str)


def proxy_key(namespace: str, name: str) -> ProxyKey:
    """`namespace/name`, the identity used across the health engine and the lease store."""
    return ProxyKey(f"{namespace}/{name}")


@dataclass(frozen=True)
class ProxyCredentials:
    """Basic-auth credentials a managed proxy requires (generated per Proxy)."""

    username: str
    password: str

    def __repr__(self) -> str:
        return f"ProxyCredentials(username={self.username!r}, password=<redacted>)"
