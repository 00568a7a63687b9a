"""Every refusal is a JSON `{error, detail}` body; nothing reaches a client as a traceback.

    ApiError                raised by handlers and parsers: status + code + detail
    StoreUnavailableError   the lease store did not answer: 503 store_unavailable, Retry-After
    web.HTTPException       raised by aiohttp (unknown route 404, method 405, body 413)
    any other Exception     a bug: logged with its traceback, answered 500 internal_error

`json_errors` is the outermost middleware and turns all three into the same body.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from aiohttp import web
from aiohttp.typedefs import Handler

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


class ApiError(EgressProxiesError):
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


@web.middleware
async def json_errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Answer every refusal and every failure with a JSON error body."""
    try:
        return await handler(request)
    except ApiError as error:
        return error.response()
    except StoreUnavailableError as error:
        return store_unavailable(error).response()
    except web.HTTPException as error:
        if error.status < 400:
            raise
        code = _CODES_BY_STATUS.get(error.status, "http_error")
        headers = {name: error.headers[name] for name in _KEPT_HEADERS if name in error.headers}
        detail = _detail(request, error)
        return ApiError(error.status, code, detail, headers).response()
    except Exception:
        logger.exception("discovery request %s %s failed", request.method, request.path)
        return ApiError(500, "internal_error", "the server failed; see its log").response()


def store_unavailable(error: StoreUnavailableError) -> ApiError:
    """The 503 for a lease store that did not answer (the client retries; nothing changed)."""
    return ApiError(503, "store_unavailable", error.detail, {"Retry-After": str(error.retry_after)})


def _detail(request: web.Request, error: web.HTTPException) -> str:
    if error.status == 404:
        return "no such route; see /openapi.json"
    if error.status == 405:
        return f"{request.method} is not allowed on this route"
    if error.status == 413:
        return f"request bodies are limited to {request.client_max_size} bytes"
    return error.reason
