"""The real prober through real squid processes to local HTTP and HTTPS origins."""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator, Iterator

import pytest
from aiohttp import web

from egress_proxies.catalog import ProxyRecord, proxy_key
from egress_proxies.health import Failure, HttpProber
from egress_proxies.model import HealthCheck
from egress_proxies.stacks.inputs import ProxyCredentials
from harness.origins import ORIGIN_BODY, Origin
from harness.squid import SquidProcess, free_ports
from tests.conftest import wait_for

pytestmark = pytest.mark.integration

CREDENTIALS = ProxyCredentials("crawler", "s3cret-pass")


def record(
    proxy: tuple[str, int],
    url: str,
    *,
    credentials: ProxyCredentials | None = CREDENTIALS,
    **check: object,
) -> ProxyRecord:
    host, port = proxy
    return ProxyRecord(
        key=proxy_key("ns", "p"),
        uid="uid-p",
        namespace="ns",
        name="p",
        scheme="http",
        host=host,
        port=port,
        health_check=HealthCheck.model_validate(
            {"url": url, "expected_status": 200, "timeout_seconds": 1, **check}
        ),
        credentials=credentials,
    )


async def logged(squid: SquidProcess, pattern: str, times: int = 1) -> None:
    """Wait until squid's access log matches `pattern` at least `times` times."""

    async def enough() -> bool:
        return len(re.findall(pattern, squid.access_log.read_text())) >= times

    await wait_for(enough, timeout=5)


@pytest.fixture(scope="module")
def squid() -> Iterator[SquidProcess]:
    with SquidProcess(credentials=CREDENTIALS) as process:
        yield process


@pytest.fixture(scope="module")
def proxy(squid: SquidProcess) -> tuple[str, int]:
    return squid.host, squid.ports[0]


@pytest.fixture
async def prober(https_origin: Origin) -> AsyncIterator[HttpProber]:
    async with HttpProber(https_origin.client_ssl) as prober:
        yield prober


@pytest.mark.parametrize("scheme", ["http", "https"])
async def test_a_probe_through_an_authenticated_squid_succeeds(
    scheme: str,
    prober: HttpProber,
    proxy: tuple[str, int],
    http_origin: Origin,
    https_origin: Origin,
) -> None:
    origin = https_origin if scheme == "https" else http_origin
    result = await prober.probe(record(proxy, origin.url, expect_body=ORIGIN_BODY))
    assert (result.ok, result.failure, result.detail) == (True, None, "")
    assert 0 < result.latency_seconds < 1


async def test_a_probe_through_an_open_squid_needs_no_credentials(
    prober: HttpProber, https_origin: Origin
) -> None:
    with SquidProcess(ports=2) as open_squid:
        for port in open_squid.ports:
            result = await prober.probe(
                record((open_squid.host, port), https_origin.url, credentials=None)
            )
            assert result.ok, result


async def test_every_https_probe_opens_its_own_connect_tunnel(
    prober: HttpProber, squid: SquidProcess, proxy: tuple[str, int], https_origin: Origin
) -> None:
    target = https_origin.url.removeprefix("https://").rstrip("/")

    def tunnels() -> int:
        return squid.access_log.read_text().count(f"CONNECT {target} ")

    before = tunnels()
    for _ in range(3):
        assert (await prober.probe(record(proxy, https_origin.url))).ok
    await logged(squid, f"CONNECT {target} ", before + 3)  # squid logs a tunnel as it closes
    assert tunnels() == before + 3


@pytest.mark.parametrize("scheme", ["http", "https"])
async def test_an_unexpected_status_fails(
    scheme: str,
    prober: HttpProber,
    proxy: tuple[str, int],
    http_origin: Origin,
    https_origin: Origin,
) -> None:
    origin = https_origin if scheme == "https" else http_origin
    result = await prober.probe(record(proxy, origin.url, expected_status=204))
    assert result.failure == Failure.UNEXPECTED_STATUS
    assert result.detail == f"{origin.url} answered 200, expected 204"


@pytest.mark.parametrize("scheme", ["http", "https"])
async def test_a_body_without_the_expected_text_fails(
    scheme: str,
    prober: HttpProber,
    proxy: tuple[str, int],
    http_origin: Origin,
    https_origin: Origin,
) -> None:
    origin = https_origin if scheme == "https" else http_origin
    result = await prober.probe(record(proxy, origin.url, expect_body="welcome, crawler"))
    assert result.failure == Failure.BODY_MISMATCH
    assert "'welcome, crawler'" in result.detail


async def test_connect_accepted_but_an_untrusted_origin_certificate_fails(
    proxy: tuple[str, int], squid: SquidProcess, https_origin: Origin
) -> None:
    async with HttpProber() as system_trust_only:
        result = await system_trust_only.probe(record(proxy, https_origin.url))
    assert result.failure == Failure.TLS_FAILED
    assert "CERTIFICATE_VERIFY_FAILED" in result.detail
    target = https_origin.url.removeprefix("https://").rstrip("/")
    await logged(squid, f"TCP_TUNNEL/200 .* CONNECT {target} crawler")  # the tunnel was open


@pytest.mark.parametrize("scheme", ["http", "https"])
@pytest.mark.parametrize(
    "credentials", [ProxyCredentials("crawler", "wrong"), None], ids=["wrong", "none"]
)
async def test_rejected_proxy_credentials_fail(
    scheme: str,
    credentials: ProxyCredentials | None,
    prober: HttpProber,
    proxy: tuple[str, int],
    http_origin: Origin,
    https_origin: Origin,
) -> None:
    origin = https_origin if scheme == "https" else http_origin
    result = await prober.probe(record(proxy, origin.url, credentials=credentials))
    assert result.failure == Failure.PROXY_AUTH_REJECTED


async def test_an_origin_the_proxy_cannot_reach_fails_per_scheme(
    prober: HttpProber, proxy: tuple[str, int]
) -> None:
    [closed] = free_ports(1)
    plain = await prober.probe(record(proxy, f"http://127.0.0.1:{closed}/"))
    assert (plain.failure, plain.detail) == (
        Failure.UNEXPECTED_STATUS,
        f"http://127.0.0.1:{closed}/ answered 503, expected 200",
    )
    tunnel = await prober.probe(record(proxy, f"https://127.0.0.1:{closed}/"))
    assert tunnel.failure == Failure.TUNNEL_REFUSED
    assert tunnel.detail.startswith("the proxy answered CONNECT with 503")


async def test_a_proxy_that_is_not_running_fails_fast(
    prober: HttpProber, http_origin: Origin
) -> None:
    [closed] = free_ports(1)
    result = await prober.probe(record(("127.0.0.1", closed), http_origin.url))
    assert result.failure == Failure.PROXY_UNREACHABLE
    assert result.detail.startswith(f"cannot connect to the proxy at http://127.0.0.1:{closed}")
    assert result.latency_seconds < 0.5


async def test_a_proxy_that_accepts_and_answers_too_late_is_bounded_by_the_timeout(
    prober: HttpProber, http_origin: Origin
) -> None:
    # Decided by the order of the loop's timers (they fire in deadline order however
    # busy the machine is), not by a stopwatch: the 1 s probe is still waiting 0.99 s
    # after it starts, and has given up before the proxy would answer, at 1.5 s (had
    # the probe waited that long, it would have succeeded).
    accepted: list[asyncio.StreamWriter] = []
    loop = asyncio.get_running_loop()
    waiting_at_0_99: list[bool] = []

    async def swallow(_: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        accepted.append(writer)

    def answer_too_late() -> None:
        for writer in accepted:
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")

    def hang_up() -> None:
        for writer in accepted:
            writer.close()

    server = await asyncio.start_server(swallow, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    timers: list[asyncio.TimerHandle] = []
    try:
        probing = asyncio.create_task(prober.probe(record(("127.0.0.1", port), http_origin.url)))
        timers.append(loop.call_later(0.99, lambda: waiting_at_0_99.append(not probing.done())))
        await asyncio.sleep(0)  # the probe has started, and with it its timeout
        timers.append(loop.call_later(1.5, answer_too_late))
        result = await probing
    finally:
        for timer in timers:
            timer.cancel()
        hang_up()
        server.close()
        await server.wait_closed()
    assert (result.failure, result.detail) == (Failure.TIMEOUT, "no answer within 1 s")
    assert accepted, "the proxy accepted the connection"
    assert waiting_at_0_99 == [True]


async def test_targets_see_no_tracing_credentials_or_forwarding_headers(
    prober: HttpProber, proxy: tuple[str, int]
) -> None:
    seen: list[dict[str, str]] = []

    async def record_headers(request: web.Request) -> web.Response:
        seen.append(dict(request.headers))
        return web.Response(text="ok")

    app = web.Application()
    app.router.add_get("/", record_headers)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        port = runner.addresses[0][1]
        assert (await prober.probe(record(proxy, f"http://127.0.0.1:{port}/"))).ok
    finally:
        await runner.cleanup()
    [headers] = seen
    names = {name.lower() for name in headers}
    assert not names & {
        "traceparent",
        "tracestate",
        "baggage",
        "proxy-authorization",
        "authorization",
        "cookie",
        "via",
        "x-forwarded-for",
        "forwarded",
    }, headers
