"""A worker process for the stack operations, started on demand and retired when idle.

An inline Automation API run happens in the process that calls it: pulumi's
language host (a gRPC server) and the program's resource registrations
allocate in that process's C heap (gRPC, protobuf, OpenSSL), and glibc keeps
most of that heap after a burst of operations. Run in the operator, a
creation burst of a few hundred Proxies left it about 40 MiB larger for
good. In this worker the heap goes when the process does: it exits after
`worker_idle` seconds without an operation, or once it has taken
`worker_operations` operations and finished them (the next operation starts
a fresh worker), so a steady fleet costs the operator nothing of it.

One worker at a time runs up to `concurrency` operations in its threads,
as the operator's own thread pool would. Requests and replies are pickled
frames on the worker's stdin and a private copy of its stdout; its stderr
(and any stray print) is the operator's. If the worker dies, each operation
it had in flight fails as a StackOperationError, which the reconciler
retries like any failed `up`; the next operation starts a new worker.
Closing lets operations in flight finish, as the thread pool's shutdown did;
a closed worker refuses new ones (ClosedError) rather than start a new process.
"""

from __future__ import annotations

import asyncio
import contextvars
import itertools
import logging
import os
import pickle
import struct
import sys
from dataclasses import dataclass, field
from typing import Any

from egress_proxies.clock import Clock, SystemClock
from egress_proxies.errors import ClosedError
from egress_proxies.stacks.errors import StackOperationError
from egress_proxies.stacks.settings import RunnerSettings

logger = logging.getLogger(__name__)

HEADER = struct.Struct(">I")
_CLOSE_TIMEOUT = 600.0  # an `up` in flight is let finish, as the thread pool's shutdown did


def frame(message: object) -> bytes:
    """One message as the worker protocol carries it: length, then pickle."""
    body = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    return HEADER.pack(len(body)) + body


@dataclass(eq=False)
class _Call:
    future: asyncio.Future[Any]
    operation: str
    stack: str


@dataclass(eq=False)
class _Process:
    """One worker process and the operations it has in flight."""

    process: asyncio.subprocess.Process
    calls: dict[int, _Call] = field(default_factory=dict)
    taken: int = 0  # operations sent to it
    retiring: bool = False  # takes no new operation; stops once its calls are done
    reader: asyncio.Task[None] | None = None
    idle: asyncio.Task[None] | None = None  # retires it after `worker_idle` on the clock
    body_length: int | None = None  # a reply's header read, its body not yet


class StackWorker:
    """Sends stack operations to a worker process, starting and retiring it as needed."""

    def __init__(self, settings: RunnerSettings, clock: Clock | None = None) -> None:
        self._settings = settings
        self._clock = clock or SystemClock()
        self._current: _Process | None = None
        self._live: set[_Process] = set()
        self._starting = asyncio.Lock()
        self._ids = itertools.count()
        self._closed = False
        self.started = 0  # worker processes started, for tests and metrics

    def __repr__(self) -> str:
        pid = self._current.process.pid if self._current else None
        return f"<StackWorker [pid: {pid} | live: {len(self._live)} | started: {self.started}]>"

    @property
    def pids(self) -> list[int]:
        """The pids of the worker processes alive now (a retiring one included)."""
        return [proc.process.pid for proc in self._live]

    async def call(self, operation: str, stack: str, *args: Any) -> Any:
        """Run `StackOperations.<operation>(stack, *args)` in the worker; its result or error.

        Raises TypeError, and sends nothing, for arguments that do not pickle;
        ClosedError, and starts nothing, once the worker is closed.
        """
        if self._closed:
            raise ClosedError(
                f"pulumi {operation} of stack {stack}: the stack worker is closed "
                "(the operator is shutting down); no new worker process is started"
            )
        try:
            arguments = pickle.dumps((stack, *args), protocol=pickle.HIGHEST_PROTOCOL)
        except (pickle.PicklingError, AttributeError, TypeError) as error:
            raise TypeError(
                f"pulumi {operation} of stack {stack}: its arguments cannot be sent to the "
                f"stack worker ({error}); a program must be a module-level function or an "
                "outputs.BoundProgram"
            ) from None
        proc = await self._take()
        call_id = next(self._ids)
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        proc.calls[call_id] = _Call(future, operation, stack)
        stdin = proc.process.stdin
        assert stdin is not None  # started with a pipe
        try:
            stdin.write(frame((call_id, operation, arguments)))
            await stdin.drain()
        except (ConnectionError, RuntimeError):
            pass  # the worker is gone: its reader fails the call
        # A cancelled caller leaves the operation running; the reply is dropped.
        return await future

    async def close(self) -> None:
        """Stop taking operations, let the ones in flight finish, and reap every worker."""
        self._closed = True
        self._current = None
        for proc in list(self._live):
            self._stop(proc)
        for proc in list(self._live):
            if proc.reader is None:
                continue
            if proc.reader.cancelled():
                # kopf, stopping, cancels every task made after it started; this
                # runs after kopf, so a new reader takes up where that one stopped.
                proc.reader = self._reader(proc)
            try:
                await asyncio.wait_for(asyncio.shield(proc.reader), _CLOSE_TIMEOUT)
            except TimeoutError:
                logger.error("stack worker %d did not stop; killing it", proc.process.pid)
                proc.process.kill()
                await proc.reader

    async def _take(self) -> _Process:
        async with self._starting:
            proc = self._current
            if proc is None or proc.retiring or proc.process.returncode is not None:
                proc = await self._start()
                self._current = proc
        if proc.idle is not None:
            proc.idle.cancel()
            proc.idle = None
        proc.taken += 1
        if proc.taken >= self._settings.worker_operations:
            proc.retiring = True  # the next operation starts a fresh worker
            self._current = None
        return proc

    async def _start(self) -> _Process:
        env = dict(os.environ)
        # The worker imports this package from wherever the operator did.
        env["PYTHONPATH"] = os.pathsep.join(path for path in sys.path if path)
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            self._settings.worker_module,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            env=env,
        )
        assert process.stdin is not None
        process.stdin.write(frame(self._settings))
        proc = _Process(process)
        # A context of its own: not the log context of the Proxy whose call started it.
        proc.reader = self._reader(proc)
        self._live.add(proc)
        self.started += 1
        logger.info("stack worker %d started", process.pid)
        return proc

    def _reader(self, proc: _Process) -> asyncio.Task[None]:
        return asyncio.create_task(
            self._read(proc),
            name=f"stack-worker-{proc.process.pid}",
            context=contextvars.Context(),
        )

    async def _read(self, proc: _Process) -> None:
        """Hand each reply to its caller until the worker exits; cancelled, nothing is lost.

        `readexactly` takes no bytes until it has them all, and a reply's
        length is kept on `proc` once read, so a reader started anew after a
        cancel goes on with the same reply.
        """
        try:
            while True:
                call_id, ok, value = await self._next_reply(proc)
                call = proc.calls.pop(call_id, None)
                if call is not None and not call.future.done():
                    if ok:
                        call.future.set_result(value)
                    else:
                        call.future.set_exception(value)
                if not proc.calls:
                    self._idle(proc)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        code = await proc.process.wait()
        self._live.discard(proc)
        if self._current is proc:
            self._current = None
        if proc.idle is not None:
            proc.idle.cancel()
        for call in proc.calls.values():
            if not call.future.done():
                call.future.set_exception(
                    StackOperationError(
                        call.operation,
                        call.stack,
                        f"the stack worker process {proc.process.pid} exited with code {code} "
                        "during the operation; it is retried",
                    )
                )
        proc.calls.clear()
        log = logger.info if code == 0 and proc.retiring else logger.warning
        log("stack worker %d exited with code %s", proc.process.pid, code)

    @staticmethod
    async def _next_reply(proc: _Process) -> tuple[int, bool, Any]:
        stdout = proc.process.stdout
        assert stdout is not None
        if proc.body_length is None:
            (proc.body_length,) = HEADER.unpack(await stdout.readexactly(HEADER.size))
        body = await stdout.readexactly(proc.body_length)
        proc.body_length = None
        reply: tuple[int, bool, Any] = pickle.loads(body)  # noqa: S301 (our own child)
        return reply

    def _idle(self, proc: _Process) -> None:
        """No operation in flight: a retiring worker stops, a current one after `worker_idle`."""
        if proc.retiring:
            self._stop(proc)
        elif proc.idle is None:
            proc.idle = asyncio.create_task(
                self._stop_when_idle(proc),
                name=f"stack-worker-{proc.process.pid}-idle",
                context=contextvars.Context(),
            )

    async def _stop_when_idle(self, proc: _Process) -> None:
        await self._clock.sleep(self._settings.worker_idle)
        proc.idle = None
        if not proc.calls:
            self._stop(proc)

    def _stop(self, proc: _Process) -> None:
        """Close the worker's stdin: it finishes what it has in flight and exits."""
        proc.retiring = True
        if self._current is proc:
            self._current = None
        stdin = proc.process.stdin
        if stdin is not None and not stdin.is_closing():
            stdin.close()
