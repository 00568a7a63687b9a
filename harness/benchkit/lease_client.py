"""Just enough HTTP/1.1 client to load the lease API: one keep-alive connection, no more.

`bench.leases` and `bench.tier` load the discovery API with many of these at
once; an aiohttp client would cost more CPU than the server it measures.
"""

from __future__ import annotations

import asyncio

TOKEN = "bench-token-0123456789abcdef"  # the discovery token both benchmarks' servers accept


class Client:
    """One keep-alive HTTP/1.1 connection; just enough client to load the server."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._reader, self._writer = reader, writer

    @classmethod
    async def connect(cls, port: int) -> Client:
        """Open a connection to 127.0.0.1:port."""
        return cls(*await asyncio.open_connection("127.0.0.1", port))

    async def request(self, method: str, path: str, body: bytes = b"") -> tuple[int, bytes]:
        """Send one request, return the status and body."""
        head = (
            f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            f"Authorization: Bearer {TOKEN}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n"
        )
        self._writer.write(head.encode() + body)
        status = int((await self._reader.readline()).split()[1])
        length = 0
        while (line := await self._reader.readline()) != b"\r\n":
            name, _, value = line.partition(b":")
            if name.lower() == b"content-length":
                length = int(value)
        return status, await self._reader.readexactly(length)

    def close(self) -> None:
        """Close the connection."""
        self._writer.close()
