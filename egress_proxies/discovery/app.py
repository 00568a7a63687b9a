"""The aiohttp application: routes, body limit, and how to serve it."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from aiohttp import web
from aiohttp.typedefs import Middleware

from egress_proxies.catalog import ProxyCatalog
from egress_proxies.discovery.auth import BearerAuth, TokenNames, TokenSource
from egress_proxies.discovery.doors import ProxyDoors
from egress_proxies.discovery.handlers import Handlers, LeaseRequestRecorder, PoolDemandRecorder
from egress_proxies.discovery.index import IndexedCatalog
from egress_proxies.discovery.openapi import render_openapi
from egress_proxies.discovery.routing import Routes
from egress_proxies.leases import LeaseStore

DEFAULT_PORT = 8090
MAX_BODY_BYTES = 64 * 1024


def create_app(
    catalog: ProxyCatalog,
    store: LeaseStore,
    tokens: TokenSource,
    *,
    metrics: LeaseRequestRecorder | None = None,
    demand: PoolDemandRecorder | None = None,
    allow_no_auth: bool = False,
    token_names: TokenNames | None = None,
    synced: Callable[[], bool] = lambda: True,
    blocked: Callable[[], str | None] = lambda: None,
    middlewares: Sequence[Middleware] = (),
) -> web.Application:
    """The discovery API over `catalog` and `store`.

    `tokens` is called on every request, so a rotated Secret applies at once;
    `token_names` names each (its Secret key: a TokenDirectory's `names`), which the
    request's handlers can read (requester.py).
    With no tokens every request except /healthz, /readyz and /openapi.json is refused,
    unless `allow_no_auth` is set, which disables authentication (logged loudly).
    `synced` says whether `catalog` holds the fleet yet (the separate tier's
    watch); /readyz is 503 not_synced until it does. `blocked` names a failing
    dependency of the process (the operator's state backend): /readyz is 503
    unavailable while it does.
    `middlewares` (aiohttp-style: tracing) run outermost around every route,
    composed once here rather than by aiohttp per request (see routing.py).
    """
    auth = BearerAuth(tokens, allow_no_auth=allow_no_auth, names=token_names)
    auth.refresh()
    indexed = IndexedCatalog(catalog)
    doors = ProxyDoors(indexed, store, tokens)
    handlers = Handlers(
        indexed,
        store,
        metrics,
        render_openapi(store.max_ttl),
        synced,
        doors,
        demand,
        blocked,
    )
    app = web.Application(client_max_size=MAX_BODY_BYTES)
    routes = Routes(app, auth, middlewares)
    lease = "/v1/leases/{lease_id}"
    routes.add("GET", "/healthz", handlers.health, public=True)
    routes.add("GET", "/readyz", handlers.ready, public=True)
    routes.add("GET", "/openapi.json", handlers.openapi, public=True)
    routes.add("GET", "/v1/proxies", handlers.list_proxies)
    # Signed by the proxy's key, not a bearer token (doors.py).
    routes.add("GET", "/v1/proxies/{namespace}/{name}/revocations", doors.revocations, public=True)
    routes.add("POST", "/v1/leases", handlers.acquire)
    routes.add("DELETE", lease, handlers.release)
    routes.add("POST", lease + "/report", handlers.report)
    routes.add("POST", lease + "/renew", handlers.renew)
    routes.close()
    return app


async def start(app: web.Application, host: str, port: int = DEFAULT_PORT) -> web.AppRunner:
    """Serve `app` on host:port; stop it with `await runner.cleanup()`."""
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, host, port).start()
    return runner
