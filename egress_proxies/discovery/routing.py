"""Routes that need no aiohttp middleware: each handler is wrapped once, at startup.

aiohttp runs application middlewares through a chain it assembles for every
request, plus a layer of its own once there is any; that machinery is a
measurable part of a small request (in `bench.leases`' server one pass-through
middleware added roughly a tenth of a trivial request's CPU). So the app
registers no aiohttp middleware:
each route's handler is wrapped when the route is added, innermost first, in
authentication, then the JSON error answer, then the middlewares given
(tracing). What aiohttp would answer by itself, 405 on a known path with
another method and 404 on an unknown path, are routes here too (any method
on each path, and a catch-all added last), so they get the same JSON body,
authentication and span as every other answer.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial

from aiohttp import hdrs, web
from aiohttp.typedefs import Handler, Middleware

from egress_proxies.discovery.auth import BearerAuth
from egress_proxies.discovery.errors import error_response
from egress_proxies.discovery.requester import serving

CATCH_ALL = "/{path:.*}"


class Routes:
    """Adds the API's routes to `app`, each wrapped in auth, JSON errors and `middlewares`."""

    def __init__(
        self, app: web.Application, auth: BearerAuth, middlewares: Sequence[Middleware]
    ) -> None:
        self._app = app
        self._auth = auth
        self._middlewares = tuple(middlewares)
        self._public: set[str] = set()
        self._closed = False

    def __repr__(self) -> str:
        routes = sum(len(resource) for resource in self._app.router.resources())
        return f"<Routes [routes: {routes}, public paths: {len(self._public)}]>"

    def add(self, method: str, path: str, handler: Handler, *, public: bool = False) -> None:
        """Route `method path` to `handler`; `public` routes need no bearer token."""
        if public:
            self._public.add(path)
        wrapped = self._wrap(handler, public=public)
        if method == hdrs.METH_GET:  # as router.add_get does
            self._app.router.add_route(hdrs.METH_HEAD, path, wrapped)
        self._app.router.add_route(method, path, wrapped)

    def close(self) -> None:
        """Add the 405 and 404 routes; call once, after the last `add`."""
        if self._closed:
            raise RuntimeError("the fallback routes are already added")
        self._closed = True
        for resource in list(self._app.router.resources()):
            assert isinstance(resource, web.Resource), resource  # only add() made them
            allowed = frozenset(route.method for route in resource)
            public = resource.canonical in self._public
            resource.add_route(
                hdrs.METH_ANY, self._wrap(partial(_not_allowed, allowed), public=public)
            )
        self._app.router.add_route(hdrs.METH_ANY, CATCH_ALL, self._wrap(_not_found, public=False))

    def _wrap(self, handler: Handler, *, public: bool) -> Handler:
        check = None if public else self._auth.check

        async def answer(request: web.Request) -> web.StreamResponse:
            try:
                if check is not None:
                    serving(check(request.headers.get(hdrs.AUTHORIZATION)))
                return await handler(request)
            except Exception as error:
                return error_response(request, error)

        wrapped: Handler = answer
        for middleware in reversed(self._middlewares):
            wrapped = partial(middleware, handler=wrapped)
        return wrapped


async def _not_allowed(allowed: frozenset[str], request: web.Request) -> web.StreamResponse:
    raise web.HTTPMethodNotAllowed(request.method, allowed)


async def _not_found(_: web.Request) -> web.StreamResponse:
    raise web.HTTPNotFound()
