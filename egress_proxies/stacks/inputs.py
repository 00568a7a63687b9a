"""What an inline program receives: everything it needs to declare one proxy's resources."""

from __future__ import annotations

from dataclasses import dataclass

from egress_proxies.model import ProxySpec
from egress_proxies.values import ProxyCredentials

__all__ = ["SQUID_PORT", "ProgramInputs", "ProxyCredentials"]

SQUID_PORT = 3128


@dataclass(frozen=True)
class ProgramInputs:
    """One Proxy as an inline program sees it. Programs export `ip` and `instanceId`."""

    namespace: str
    name: str
    uid: str
    instance_name: str
    spec: ProxySpec
    credentials: ProxyCredentials
    cloud_init: str | None = None
    port: int = SQUID_PORT
    adopt_instance: str | None = None  # a provider import id: an existing VM to take over
    shard: str | None = None  # the operator shard's name, labelled on every resource
    # The discovery API as the proxy reaches it, for its revocation list (None: none).
    discovery_url: str | None = None

    def __repr__(self) -> str:
        return (
            f"<ProgramInputs {self.namespace}/{self.name} uid={self.uid} "
            f"instance={self.instance_name} cloud_init={'set' if self.cloud_init else 'none'}>"
        )
