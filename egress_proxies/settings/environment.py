"""The process environment, where the composition roots take it from.

Options are read by the settings models. The few variables that are not
options are read by the components that own them, from the mapping the
composition root passes: logging (`EGRESS_PROXIES_LOG_FORMAT`,
`..._LOG_LEVEL`), tracing (`OTEL_*`), heap snapshots
(`EGRESS_PROXIES_TRACEMALLOC_*`), the peer identity (`POD_ID`), the stack
passphrase (`EGRESS_PROXIES_PASSPHRASE_FILE`, `PULUMI_CONFIG_PASSPHRASE`),
the pulumi root (`EGRESS_PROXIES_PULUMI_ROOT`) and the `PATH` pulumi's
providers run with. `tests/house/test_env_access.py` keeps every other read
of `os.environ` out of the product.
"""

from __future__ import annotations

import os
from collections.abc import Mapping


def process_environment() -> Mapping[str, str]:
    """This process's environment variables."""
    return os.environ


def drop_trace_context() -> None:
    """Forget an inherited W3C trace context before pulumi is imported.

    pulumi reads TRACEPARENT when imported and installs its own tracer
    provider: OTEL_* would be ignored and every span would join that trace.
    """
    os.environ.pop("TRACEPARENT", None)
    os.environ.pop("TRACESTATE", None)
