"""The error an inline program raises for a spec it cannot turn into resources."""

from __future__ import annotations

import pulumi

from egress_proxies.errors import EgressProxiesError
from egress_proxies.stacks.errors import PERMANENT_PROGRAM_ERROR_MARKER


class PermanentProgramError(pulumi.RunError, EgressProxiesError):
    """A spec the program cannot turn into resources; `field` names the offending spec field.

    A `pulumi.RunError` is reported by the Automation API as its message alone,
    without a traceback, so the text `classify` sees is exactly `str(self)`.
    """

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{PERMANENT_PROGRAM_ERROR_MARKER}: {field}: {message}")
        self.field = field
        self.message = message
