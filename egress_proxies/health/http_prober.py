"""The real prober: one request THROUGH the proxy, on a fresh connection, within the timeout.

http:// check URLs are fetched with a plain GET via the proxy; https:// ones
through a CONNECT tunnel with TLS to the origin inside it. Connections are
never kept alive: a pooled CONNECT tunnel would let later probes skip the
very step that breaks first on a sick proxy. No tracing is attached to the
session, so no traceparent (or any other header of ours) reaches a target.
"""

from __future__ import annotations

import asyncio
import base64
import ssl
import time
from types import TracebackType

import aiohttp

from egress_proxies.catalog import ProxyRecord
from egress_proxies.health.probe import Failure, ProbeResult
from egress_proxies.model import HealthCheck
from egress_proxies.values import ProxyCredentials

MAX_BODY_BYTES = 1024 * 1024
"""expectBody must appear within this much of the (decompressed) body."""


class HttpProber:
    """Probes through proxies with one shared aiohttp session that never reuses a connection.

    Use as `async with HttpProber(ssl_context) as prober:`. `ssl_context`
    verifies origins (default: the system trust store).
    """

    def __init__(self, ssl_context: ssl.SSLContext | None = None) -> None:
        self._ssl: ssl.SSLContext | bool = ssl_context if ssl_context is not None else True
        self._session: aiohttp.ClientSession | None = None

    def __repr__(self) -> str:
        return f"<HttpProber {'open' if self._session is not None else 'closed'}>"

    async def __aenter__(self) -> HttpProber:
        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(force_close=True, limit=0, ssl=self._ssl),
            cookie_jar=aiohttp.DummyCookieJar(),
            timeout=aiohttp.ClientTimeout(total=None),
            trust_env=False,
        )
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def probe(self, record: ProxyRecord) -> ProbeResult:
        """Fetch the record's health-check URL through its proxy; never raises for a failure."""
        if self._session is None:
            raise RuntimeError("HttpProber is used outside `async with`")
        check = record.health_check
        started = time.perf_counter()
        try:
            async with asyncio.timeout(check.timeout_seconds):
                failure, detail = await _fetch(self._session, record)
        except TimeoutError:
            failure, detail = Failure.TIMEOUT, f"no answer within {check.timeout_seconds} s"
        except aiohttp.ClientHttpProxyError as error:
            failure = Failure.PROXY_AUTH_REJECTED if error.status == 407 else Failure.TUNNEL_REFUSED
            detail = f"the proxy answered CONNECT with {error.status} {error.message}"
        except (aiohttp.ClientSSLError, ssl.SSLError) as error:
            failure, detail = Failure.TLS_FAILED, f"TLS with {check.url} failed: {_reason(error)}"
        except aiohttp.ClientProxyConnectionError as error:
            failure = Failure.PROXY_UNREACHABLE
            detail = f"cannot connect to the proxy at {record.proxy_url}: {error.strerror}"
        except (aiohttp.ClientError, OSError) as error:
            failure = Failure.CONNECTION_FAILED
            detail = f"{check.url} through the proxy failed: {_reason(error)}"
        return ProbeResult(time.perf_counter() - started, failure, detail)


async def _fetch(session: aiohttp.ClientSession, record: ProxyRecord) -> tuple[Failure | None, str]:
    check = record.health_check
    authorization = _proxy_authorization(record.credentials)
    # aiohttp sends proxy_headers only on CONNECT; a plain-HTTP request goes to the
    # proxy itself, so its Proxy-Authorization travels with the request's headers.
    tunnelled = check.url.startswith("https://")
    async with session.get(
        check.url,
        proxy=record.proxy_url,
        proxy_headers=authorization if tunnelled else None,
        headers=None if tunnelled else authorization,
        allow_redirects=False,
    ) as response:
        if response.status == 407:
            return (
                Failure.PROXY_AUTH_REJECTED,
                "the proxy answered 407: proxy authentication required",
            )
        if response.status != check.expected_status:
            return (
                Failure.UNEXPECTED_STATUS,
                f"{check.url} answered {response.status}, expected {check.expected_status}",
            )
        if check.expect_body and not await _contains(response.content, check.expect_body):
            return Failure.BODY_MISMATCH, _body_mismatch(check)
    return None, ""


def _proxy_authorization(credentials: ProxyCredentials | None) -> dict[str, str] | None:
    if credentials is None:
        return None
    token = base64.b64encode(f"{credentials.username}:{credentials.password}".encode()).decode()
    return {"Proxy-Authorization": f"Basic {token}"}


async def _contains(body: aiohttp.StreamReader, text: str) -> bool:
    """True once `text` (UTF-8) appears in the first MAX_BODY_BYTES; reads no further."""
    needle = text.encode()
    keep = len(needle) - 1  # bytes of one chunk a match may continue into the next
    carry, received = b"", 0
    async for chunk in body.iter_any():
        window = carry + chunk
        if needle in window:
            return True
        received += len(chunk)
        if received >= MAX_BODY_BYTES:
            return False
        carry = window[len(window) - keep :] if keep else b""
    return False


def _body_mismatch(check: HealthCheck) -> str:
    expected = check.expect_body or ""
    shown = expected if len(expected) <= 64 else expected[:61] + "..."
    return f"{check.url} answered without the expected text {shown!r}"


def _reason(error: BaseException) -> str:
    text = str(error) or type(error).__name__
    return text if len(text) <= 300 else text[:297] + "..."
