"""The stack worker process (`python -m egress_proxies.stacks.worker_main`); see `stacks.worker`.

Reads the RunnerSettings, then one request per frame from stdin, runs each
in a thread of its own pool and writes the reply to what was its stdout
(fd 1 then points at stderr, so nothing else can write into the replies).
At end of input it lets the operations in flight finish and exits.
"""

from __future__ import annotations

import functools
import logging
import os
import pickle
import signal
import sys
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from typing import IO, Any

from egress_proxies.stacks.errors import StackOperationError
from egress_proxies.stacks.operations import StackOperations
from egress_proxies.stacks.settings import RunnerSettings
from egress_proxies.stacks.worker import HEADER, frame

logger = logging.getLogger("egress_proxies.stacks.worker")

OPERATIONS = frozenset({"up", "destroy", "forget"})


def read_message(channel: IO[bytes]) -> Any:
    """The next message, or None at end of input."""
    header = channel.read(HEADER.size)
    if len(header) < HEADER.size:
        return None
    (length,) = HEADER.unpack(header)
    body = channel.read(length)
    if len(body) < length:
        return None
    return pickle.loads(body)  # noqa: S301 (the operator that started us)


class _Replies:
    """Writes replies from the pool's threads, one frame at a time."""

    def __init__(self, channel: IO[bytes]) -> None:
        self._channel = channel
        self._lock = threading.Lock()

    def send(self, call_id: int, future: Future[Any]) -> None:
        error = future.exception()
        if error is None:
            message = frame((call_id, True, future.result()))
        else:
            message = frame((call_id, False, _portable(error)))
        with self._lock:
            self._channel.write(message)
            self._channel.flush()


def _portable(error: BaseException) -> BaseException:
    """The error as the operator can unpickle it: ours as they are, others as text."""
    if isinstance(error, StackOperationError):
        return error
    logger.error("stack operation failed", exc_info=error)
    return RuntimeError(f"{type(error).__qualname__} in the stack worker: {error}")


def serve(requests: IO[bytes], replies: IO[bytes]) -> None:
    """Run requests until the end of input, then wait for those in flight."""
    settings = read_message(requests)
    if not isinstance(settings, RunnerSettings):
        raise SystemExit("egress_proxies.stacks.worker_main: expected RunnerSettings first")
    operations = StackOperations(settings)
    out = _Replies(replies)
    with ThreadPoolExecutor(settings.concurrency, thread_name_prefix="pulumi") as pool:
        while (request := read_message(requests)) is not None:
            call_id, operation, arguments = request
            future = pool.submit(_run, operations, operation, arguments)
            future.add_done_callback(functools.partial(out.send, call_id))


def _run(operations: StackOperations, operation: str, arguments: bytes) -> Any:
    """One operation; its arguments are unpickled here, so that a bad one fails only its call."""
    if operation not in OPERATIONS:
        raise ValueError(f"no stack operation {operation!r}")
    args = pickle.loads(arguments)  # noqa: S301 (the operator that started us)
    return getattr(operations, operation)(*args)


def claim_stdio() -> IO[bytes]:
    """Make fd 1 the reply channel's private copy and point fd 1 at stderr; ignore Ctrl-C."""
    replies = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    # Ctrl-C reaches the whole process group; the operator decides when we stop.
    # A handler, not SIG_IGN, so the pulumi processes started here keep the default.
    signal.signal(signal.SIGINT, lambda signum, frame: None)
    return replies


def main() -> None:
    """Entry point with plain logging (`operator.stack_worker` logs as the operator does)."""
    replies = claim_stdio()
    logging.basicConfig(level=logging.INFO, stream=sys.stderr)
    serve(sys.stdin.buffer, replies)


if __name__ == "__main__":
    main()
