"""Local origin servers for proxy tests: plain HTTP and HTTPS with a throwaway CA."""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

from aiohttp import web
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from egress_proxies.devcluster.pki import issue_certificate

ORIGIN_BODY = "hello from the origin"
# Where origins listen unless told: an address the dev cluster's pods reach.
_ORIGIN_HOST = ["127.0.0.1"]


def use_origin_host(host: str) -> None:
    """Make `host` the default address of origins (the dev cluster's `host_address`)."""
    _ORIGIN_HOST[0] = host


def origin_host() -> str:
    """The address origins listen on by default."""
    return _ORIGIN_HOST[0]


@dataclass(frozen=True)
class Origin:
    """A running origin: its base URL and, for HTTPS, a client context trusting its CA."""

    url: str
    client_ssl: ssl.SSLContext | None = None
    hits: list[int] = field(default_factory=lambda: [0])  # requests served so far
    peers: list[str] = field(default_factory=list)  # the source address of each request
    failing: list[bool] = field(default_factory=lambda: [False])  # set: answer 503

    def fail(self, failing: bool) -> None:
        """Answer 503 (a failing health check) from now on, or ORIGIN_BODY again."""
        self.failing[0] = failing


def _hello(
    hits: list[int], peers: list[str], failing: list[bool]
) -> Callable[[web.Request], Awaitable[web.Response]]:
    async def handler(request: web.Request) -> web.Response:
        hits[0] += 1
        peers.append(request.remote or "")
        if failing[0]:
            return web.Response(status=503, text="failing on purpose")
        return web.Response(text=ORIGIN_BODY)

    return handler


def _tls_contexts(directory: Path, host: str) -> tuple[ssl.SSLContext, ssl.SSLContext]:
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = issue_certificate("test origin CA", ca_key, ca_key, None, is_ca=True)
    key = ec.generate_private_key(ec.SECP256R1())
    cert = issue_certificate(
        "origin", key, ca_key, ca, hosts=sorted({host, "127.0.0.1", "localhost"})
    )
    cert_file, key_file = directory / "origin.crt", directory / "origin.key"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server.load_cert_chain(cert_file, key_file)
    client = ssl.create_default_context(cadata=ca.public_bytes(serialization.Encoding.PEM).decode())
    return server, client


@asynccontextmanager
async def serve_origin(
    tls_dir: Path | None = None, host: str | None = None
) -> AsyncIterator[Origin]:
    """Serve ORIGIN_BODY on `host` (HTTPS when `tls_dir` is given) until exit.

    On a real node, pods reach the host at the cluster's `host_address`, not
    at 127.0.0.1: pass that as `host` for an origin that proxies fetch from.
    """
    host = host or origin_host()
    hits: list[int] = [0]
    peers: list[str] = []
    failing = [False]
    app = web.Application()
    app.router.add_get("/", _hello(hits, peers, failing))
    runner = web.AppRunner(app)
    await runner.setup()
    server_ssl, client_ssl = _tls_contexts(tls_dir, host) if tls_dir else (None, None)
    site = web.TCPSite(runner, host, 0, ssl_context=server_ssl)
    await site.start()
    port = runner.addresses[0][1]
    scheme = "https" if tls_dir else "http"
    try:
        yield Origin(
            url=f"{scheme}://{host}:{port}/",
            client_ssl=client_ssl,
            hits=hits,
            peers=peers,
            failing=failing,
        )
    finally:
        await runner.cleanup()
