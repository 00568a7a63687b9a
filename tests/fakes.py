"""The fakes the tests share: a catalog the test edits, and a served app for synchronous clients.

Fixtures that use them live in the `conftest.py` of the tests that need them.
"""

from __future__ import annotations

import asyncio
import queue
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from aiohttp import web

from egress_proxies.catalog import ProxyKey, ProxyRecord


class ListCatalog:
    """A ProxyCatalog the test edits.

    Like the fleet, it swaps in a new snapshot tuple on every change
    (copy-on-write), so the discovery index sees a new tuple exactly when
    the records changed.
    """

    def __init__(self, *records: ProxyRecord) -> None:
        self.snapshot: tuple[ProxyRecord, ...] = records

    def records(self) -> Sequence[ProxyRecord]:
        """The current snapshot."""
        return self.snapshot

    def replace(self, *records: ProxyRecord) -> None:
        """Swap in a new fleet."""
        self.snapshot = records

    def put(self, record: ProxyRecord) -> None:
        """Add a record, or replace the one with its key where it stands."""
        keys = [existing.key for existing in self.snapshot]
        if record.key in keys:
            at = keys.index(record.key)
            self.snapshot = (*self.snapshot[:at], record, *self.snapshot[at + 1 :])
        else:
            self.snapshot = (*self.snapshot, record)

    def remove(self, key: ProxyKey) -> None:
        """Drop the record with this key."""
        self.snapshot = tuple(record for record in self.snapshot if record.key != key)


@contextmanager
def serve_in_thread(app: web.Application) -> Iterator[str]:
    """`app` on loopback on its own event loop in a thread, for synchronous clients.

    Yields the base URL; the server is cleaned up and the thread joined on exit.
    """
    ready: queue.Queue[str] = queue.Queue()
    loop = asyncio.new_event_loop()
    stop = loop.create_future()

    async def run() -> None:
        runner = web.AppRunner(app)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        ready.put(f"http://127.0.0.1:{runner.addresses[0][1]}")
        try:
            await stop
        finally:
            await runner.cleanup()

    thread = threading.Thread(target=loop.run_until_complete, args=(run(),), daemon=True)
    thread.start()
    try:
        yield ready.get(timeout=10)
    finally:
        loop.call_soon_threadsafe(stop.set_result, None)
        thread.join(timeout=10)
        loop.close()
