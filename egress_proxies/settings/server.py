"""The discovery + lease API's options, the same for the operator and the discovery tier."""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

from egress_proxies.discovery import DEFAULT_PORT
from egress_proxies.settings.options import Options, option


class DiscoveryServerSettings(Options):
    """Where the discovery + lease API listens and whom it serves."""

    title: ClassVar[str] = "discovery API"

    discovery_port: int = option(DEFAULT_PORT, "the discovery + lease API's port", ge=0, le=65535)
    # In a pod the Service reaches the API on the pod's address: bind them all.
    discovery_host: str = option("0.0.0.0", "the address the discovery API binds")  # noqa: S104
    discovery_tokens_dir: Path | None = option(
        None, "a mounted Secret: one bearer token per file, re-read on change"
    )
    discovery_allow_no_auth: bool = option(
        False, "serve the discovery API without authentication (logged loudly)"
    )
