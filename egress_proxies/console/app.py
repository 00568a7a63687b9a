"""The console's aiohttp application: the page, its assets, the JSON API, and how to serve it.

The page and its two assets are public (they hold no data); every /api route
needs a console token. Every answer carries the security headers below, and
every refusal is a JSON `{error, detail}` body, as the discovery API's are.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from importlib import resources
from typing import Any

from aiohttp import hdrs, web
from aiohttp.abc import AbstractAccessLogger

from egress_proxies.console.handlers import ConsoleHandlers
from egress_proxies.console.sampler import Sampler
from egress_proxies.console.tally import RedisTally
from egress_proxies.discovery.errors import error_response

DEFAULT_PORT = 8091
PREFIX = "/console"
API = f"{PREFIX}/api/v1"
MAX_BODY_BYTES = 4 * 1024
# Long enough that a long query string reaches the handler and gets a JSON 400.
MAX_LINE_BYTES = 64 * 1024

SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
        "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
    "Cross-Origin-Opener-Policy": "same-origin",
    "Cross-Origin-Resource-Policy": "same-origin",
    "Permissions-Policy": "camera=(), microphone=(), geolocation=()",
    "Cache-Control": "no-store",
}
_ASSETS = {
    "index.html": "text/html; charset=utf-8",
    "console.js": "text/javascript; charset=utf-8",
    "console.css": "text/css; charset=utf-8",
    "icon.svg": "image/svg+xml",
}

Route = Callable[[web.Request], Awaitable[web.StreamResponse]]


def _asset(name: str) -> bytes:
    return resources.files("egress_proxies.console").joinpath("static", name).read_bytes()


def _static(name: str) -> Route:
    body, content_type = _asset(name), _ASSETS[name]

    async def serve(_: web.Request) -> web.Response:
        return web.Response(body=body, headers={hdrs.CONTENT_TYPE: content_type})

    return serve


async def _secure(_: web.Request, response: web.StreamResponse) -> None:
    response.headers.update(SECURITY_HEADERS)


async def _redirect(_: web.Request) -> web.StreamResponse:
    raise web.HTTPFound(f"{PREFIX}/")


async def _not_found(_: web.Request) -> web.StreamResponse:
    raise web.HTTPNotFound()


def _answered(route: Route) -> Route:
    async def answer(request: web.Request) -> web.StreamResponse:
        try:
            return await route(request)
        except Exception as error:
            return error_response(request, error)

    return answer


class AccessLogger(AbstractAccessLogger):
    """One line per request without its query string: a token pasted into a URL stays out."""

    def log(self, request: web.BaseRequest, response: web.StreamResponse, time: float) -> None:
        """Log method, path, status and seconds taken."""
        self.logger.info(
            "console %s %s %d %.3fs", request.method, request.path, response.status, time
        )


def create_console_app(
    handlers: ConsoleHandlers, sampler: Sampler, tally: RedisTally | None = None
) -> web.Application:
    """The console over `handlers`; `sampler` (and `tally`) run while the app is served."""
    app = web.Application(client_max_size=MAX_BODY_BYTES)
    app.on_response_prepare.append(_secure)
    app.cleanup_ctx.append(_running(sampler.run, "console sampler"))
    if tally is not None:
        app.cleanup_ctx.append(_running(tally.run, "console tally"))
    user = handlers.authenticated
    routes: list[tuple[str, str, Route]] = [
        ("GET", PREFIX, _redirect),
        ("GET", f"{PREFIX}/", _static("index.html")),
        ("GET", f"{PREFIX}/static/console.js", _static("console.js")),
        ("GET", f"{PREFIX}/static/console.css", _static("console.css")),
        ("GET", f"{PREFIX}/static/icon.svg", _static("icon.svg")),
        ("GET", f"{API}/session", user(handlers.session)),
        ("GET", f"{API}/fleet", user(handlers.fleet)),
        ("GET", f"{API}/sites", user(handlers.sites)),
        ("GET", f"{API}/sites/{{target}}", user(handlers.site)),
        ("GET", f"{API}/cooldowns", user(handlers.cooldowns)),
        ("GET", f"{API}/pools", user(handlers.pools)),
        ("GET", f"{API}/leases", user(handlers.leases)),
        ("POST", f"{API}/proxies/{{namespace}}/{{name}}/cordon", user(handlers.cordon)),
        ("POST", f"{API}/proxies/{{namespace}}/{{name}}/drain", user(handlers.drain)),
        ("POST", f"{API}/pools/{{namespace}}/{{name}}/scale", user(handlers.scale)),
        (
            "POST",
            f"{API}/proxies/{{namespace}}/{{name}}/clear-cooldown",
            user(handlers.clear_cooldown),
        ),
    ]
    for method, path, route in routes:
        app.router.add_route(method, path, _answered(route))
    app.router.add_route(hdrs.METH_ANY, "/{path:.*}", _answered(_not_found))
    return app


def _running(
    loop: Callable[[], Coroutine[Any, Any, None]], name: str
) -> Callable[[web.Application], AsyncIterator[None]]:
    async def run(_: web.Application) -> AsyncIterator[None]:
        task = asyncio.create_task(loop(), name=name)
        yield
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    return run


async def start_console(app: web.Application, host: str, port: int) -> web.AppRunner:
    """Serve `app` on host:port; stop it with `await runner.cleanup()`."""
    runner = web.AppRunner(app, max_line_size=MAX_LINE_BYTES, access_log_class=AccessLogger)
    await runner.setup()
    await web.TCPSite(runner, host, port).start()
    return runner


def bound_port(runner: web.AppRunner) -> int:
    """The port a runner listens on (for port 0)."""
    address: Any = runner.addresses[0]
    return int(address[1])
