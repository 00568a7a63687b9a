"""The fleet console's options, the same for the operator and the discovery tier."""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

from egress_proxies.console import DEFAULT_PORT
from egress_proxies.settings.options import Options, option


class ConsoleSettings(Options):
    """Whether the console is served, where, and to whom (docs/console.md)."""

    title: ClassVar[str] = "fleet console"

    console_tokens_dir: Path | None = option(
        None,
        "a mounted Secret of console users, one file per <user>.view or <user>.act key "
        "holding that person's token; unset: no console",
    )
    console_port: int = option(DEFAULT_PORT, "the console's port", ge=0, le=65535)
    # In a pod a port-forward or Service reaches the console on the pod's address.
    console_host: str = option("0.0.0.0", "the address the console binds")  # noqa: S104
