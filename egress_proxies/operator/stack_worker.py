"""The operator's stack worker process: `stacks.worker_main` with the operator's logging.

Started by the StackRunner as `python -m egress_proxies.operator.stack_worker`
(see `stacks.worker`); it logs in the format and at the level the operator
was given, so its lines sit in the operator's log like the operator's own.
"""

from __future__ import annotations

import os
import sys

from egress_proxies.stacks.worker_main import claim_stdio, serve
from egress_proxies.telemetry.logs import setup_logging
from egress_proxies.telemetry.memory import cap_malloc_arenas


def main() -> None:
    """Serve stack operations until the operator closes our stdin."""
    replies = claim_stdio()
    setup_logging(os.environ)  # the operator checked these variables before starting us
    cap_malloc_arenas()
    serve(sys.stdin.buffer, replies)


if __name__ == "__main__":
    main()
