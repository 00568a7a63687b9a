"""What `egress-proxies discovery` can be told: the discovery tier's options.

The same lease store, lease limits and API options as the operator's, so a
tier replica and the operator on one Redis agree; the API's flags drop the
`--discovery-` the operator needs beside its other options.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

from egress_proxies.settings.cluster import ClusterSettings
from egress_proxies.settings.console import ConsoleSettings
from egress_proxies.settings.leases import LeaseSettings
from egress_proxies.settings.options import REQUIRED, option
from egress_proxies.settings.server import DiscoveryServerSettings


class DiscoverySettings(ClusterSettings, LeaseSettings, DiscoveryServerSettings, ConsoleSettings):
    """The discovery tier's options: a shared lease store (required), limits, the API."""

    title: ClassVar[str] = "discovery tier"
    flags: ClassVar[Mapping[str, str]] = {
        "discovery_port": "--port",
        "discovery_host": "--host",
        "discovery_tokens_dir": "--tokens-dir",
        "discovery_allow_no_auth": "--allow-no-auth",
    }

    lease_store: str = option(
        REQUIRED,
        "the lease store the replicas and the operator share: a redis://, rediss:// (TLS) or "
        "unix:// URL, with AUTH in it as redis-py reads it (memory: this replica's own)",
    )
