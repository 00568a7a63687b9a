"""Value types shared across layers: a proxy's identity and its credentials.

They sit with the model (the bottom layer) so that the catalog, the health
engine, the lease store and the inline programs can all name a proxy and its
credentials without importing one another (see docs/architecture.md, Layers).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NewType

ProxyKey = NewType("ProxyKey", str)

# The key of a managed proxy's credentials Secret that holds its lease-signing key.
SIGNING_KEY = "signingKey"


def proxy_key(namespace: str, name: str) -> ProxyKey:
    """`namespace/name`, the identity used across the health engine and the lease store."""
    return ProxyKey(f"{namespace}/{name}")


@dataclass(frozen=True)
class ProxyCredentials:
    """Basic-auth credentials a proxy requires.

    A managed proxy's are the operator's own (its health probes use them) and
    `signing_key` is the key its squid verifies lease credentials with
    (leases/credentials.py); an External proxy's are its configured ones.
    """

    username: str
    password: str
    signing_key: str | None = None

    def __repr__(self) -> str:
        key = "none" if self.signing_key is None else "<redacted>"
        return (
            f"ProxyCredentials(username={self.username!r}, password=<redacted>, signing_key={key})"
        )
