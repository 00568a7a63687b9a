"""`egress-proxies run`: the operator process from its settings to its exit code."""

from __future__ import annotations

import asyncio
import logging
import signal
import sys

from egress_proxies.errors import EgressProxiesError
from egress_proxies.operator.factories import pulumi_root, shard_of, stack_passphrase
from egress_proxies.operator.peering import PeeringError
from egress_proxies.operator.process import Operator
from egress_proxies.operator.shard import ShardError
from egress_proxies.settings import RunSettings, process_environment
from egress_proxies.telemetry.logs import setup_logging
from egress_proxies.telemetry.memory import cap_malloc_arenas, snapshots_on_signal
from egress_proxies.telemetry.tracing import setup_tracing

logger = logging.getLogger(__name__)


def run_operator(settings: RunSettings) -> int:
    """The operator in the foreground until SIGINT/SIGTERM; the exit code (2: cannot start)."""
    env = process_environment()
    try:
        shard = shard_of(settings)
        setup_logging(env)
    except (ShardError, ValueError) as error:
        print(f"egress-proxies: error: {error}", file=sys.stderr)
        return 2
    setup_tracing(env)
    cap_malloc_arenas()  # before the runner's and asyncio's threads allocate
    try:
        operator = Operator(
            settings,
            passphrase=stack_passphrase(env),
            shard=shard,
            pulumi_root=pulumi_root(env),
            environment=env,
        )
    except (EgressProxiesError, KeyError, OSError, ValueError) as error:
        logger.error("cannot start: %s", error)
        return 2

    async def main() -> int:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        snapshots_on_signal(env, loop)
        try:
            await operator.run(stop)
        except PeeringError as error:
            logger.error("cannot start: %s", error)
            await operator.client.close()
            await operator.runner.close()
            return 2
        return 1 if operator.failed else 0

    return asyncio.run(main())
