"""Every refusal is a JSON `{error, detail}` body; nothing reaches a client as a traceback.

    DiscoveryApiError                raised by handlers and parsers: status + code + detail
    StoreUnavailableError   the lease store did not answer: 503 store_unavailable, Retry-After
    web.HTTPException       raised by aiohttp (unknown route 404, method 405, body 413)
    any other Exception     a bug: logged with its traceback, answered 500 internal_error

`error_response` turns all four into the same body; every route's handler is
wrapped in it (see routing.py).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from aiohttp import web

from egress_proxies.discovery.schemas import ErrorBody
from egress_proxies.errors import EgressProxiesError
from egress_proxies.leases import StoreUnavailableError

logger = logging.getLogger(__name__)

_CODES_BY_STATUS = {
    400: "bad_request",
    401: "unauthorized",
    404: "not_found",
    405: "method_not_allowed",
    413: "body_too_large",
    415: "unsupported_media_type",
}
# Headers aiohttp attaches to its own errors that a client needs (405 lists what is allowed).
_KEPT_HEADERS = ("Allow",)
_JSON_CONTENT_TYPE = {"Content-Type": "application/json; charset=utf-8"}


class DiscoveryApiError(EgressProxiesError):
    """A request the API refuses, with the status and body to answer it with."""

    def __init__(
        self, status: int, error: str, detail: str, headers: Mapping[str, str] | None = None
    ) -> None:
        super().__init__(f"{status} {error}: {detail}")
        self.status = status
        self.error = error
        self.detail = detail
        self.headers = dict(headers or {})

    def response(self) -> web.Response:
        """The JSON response for this refusal."""
        return json_response(
            ErrorBody(error=self.error, detail=self.detail).model_dump_json(),
            status=self.status,
            headers=self.headers,
        )


def json_response(
    body: str, status: int = 200, headers: Mapping[str, str] | None = None
) -> web.Response:
    """A response carrying an already serialised JSON body."""
    # Bytes and a ready header: aiohttp's text= path parses and rebuilds Content-Type.
    all_headers = {**_JSON_CONTENT_TYPE, **headers} if headers else _JSON_CONTENT_TYPE
    return web.Response(body=body.encode(), status=status, headers=all_headers)


def error_response(request: web.Request, error: Exception) -> web.Response:
    """The JSON answer to what a handler raised; re-raises HTTP exceptions below 400."""
    if isinstance(error, DiscoveryApiError):
        return error.response()
    if isinstance(error, StoreUnavailableError):
        return store_unavailable(error).response()
    if isinstance(error, web.HTTPException):
        if error.status < 400:
            raise error
        code = _CODES_BY_STATUS.get(error.status, "http_error")
        headers = {name: error.headers[name] for name in _KEPT_HEADERS if name in error.headers}
        return DiscoveryApiError(error.status, code, _detail(request, error), headers).response()
    logger.error("discovery request %s %s failed", request.method, request.path, exc_info=error)
    return DiscoveryApiError(500, "internal_error", "the server failed; see its log").response()


def store_unavailable(error: StoreUnavailableError) -> DiscoveryApiError:
    """The 503 for a lease store that did not answer (the client retries; nothing changed)."""
    return DiscoveryApiError(
        503, "store_unavailable", error.detail, {"Retry-After": str(error.retry_after)}
    )


def _detail(request: web.Request, error: web.HTTPException) -> str:
    if isinstance(error, web.HTTPNotFound):
        return "no such route; see /openapi.json"
    if isinstance(error, web.HTTPMethodNotAllowed):
        return f"{request.method} is not allowed on this route"
    if isinstance(error, web.HTTPRequestEntityTooLarge):
        return f"request bodies are limited to {request.client_max_size} bytes"
    return error.reason
