"""The fleet console's options, the same for the operator and the discovery tier."""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

from pydantic import field_validator

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

    @field_validator("console_tokens_dir")
    @classmethod
    def _is_a_directory(cls, value: Path | None) -> Path | None:
        # The kubelet mounts a Secret volume before the container starts (a missing
        # Secret keeps the pod from starting), so a path that is not there now is a
        # mistyped flag or mountPath: refused, rather than a console refusing everyone.
        if value is not None and not value.is_dir():
            raise ValueError(
                "expected the directory the console users' Secret is mounted in, "
                f"got {str(value)!r}: no such directory"
            )
        return value
