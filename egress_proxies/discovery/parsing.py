"""Turning a request's path, query and body into validated values, or a 4xx DiscoveryApiError."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeVar

from aiohttp import hdrs, web
from pydantic import BaseModel, ValidationError
from pydantic_core import ErrorDetails

from egress_proxies.discovery.errors import DiscoveryApiError
from egress_proxies.discovery.schemas import MAX_SELECTOR_ATTRIBUTES
from egress_proxies.leases import LeaseId, parse_lease_id

JSON = "application/json"
ATTRIBUTE_PREFIX = "attr."
MAX_ATTRIBUTE_LENGTH = 253
_MAX_REPORTED_ERRORS = 5

Body = TypeVar("Body", bound=BaseModel)


@dataclass(frozen=True)
class ProxyQuery:
    """GET /v1/proxies filters: attribute equality and, optionally, the health verdict."""

    selector: dict[str, str]
    healthy: bool | None


def parse_proxy_query(request: web.Request) -> ProxyQuery:
    """Read `attr.<key>=<value>` (each key once) and `healthy=true|false`; nothing else."""
    selector: dict[str, str] = {}
    healthy: bool | None = None
    seen: set[str] = set()
    for name, value in request.query.items():
        if name in seen:
            raise DiscoveryApiError(
                400, "invalid_parameter", f"query parameter {name!r} is repeated"
            )
        seen.add(name)
        if name == "healthy":
            if value not in ("true", "false"):
                raise DiscoveryApiError(
                    400, "invalid_parameter", "healthy must be 'true' or 'false'"
                )
            healthy = value == "true"
        elif name.startswith(ATTRIBUTE_PREFIX):
            attribute = name.removeprefix(ATTRIBUTE_PREFIX)
            if not 0 < len(attribute) <= MAX_ATTRIBUTE_LENGTH:
                raise DiscoveryApiError(
                    400, "invalid_parameter", f"{name!r}: attribute name length"
                )
            if len(value) > MAX_ATTRIBUTE_LENGTH:
                raise DiscoveryApiError(400, "invalid_parameter", f"{name!r}: value too long")
            selector[attribute] = value
        else:
            raise DiscoveryApiError(400, "unknown_parameter", f"unknown query parameter {name!r}")
    if len(selector) > MAX_SELECTOR_ATTRIBUTES:
        raise DiscoveryApiError(
            400, "invalid_parameter", f"at most {MAX_SELECTOR_ATTRIBUTES} attribute filters"
        )
    return ProxyQuery(selector=selector, healthy=healthy)


def reject_query(request: web.Request) -> None:
    """Routes without query parameters refuse any, rather than silently ignore a typo."""
    # The raw request target first: building the URL and parsing its query cost more
    # than the rest of a release, and almost every request has no query at all.
    if "?" in request.raw_path and request.query:
        name = next(iter(request.query))
        raise DiscoveryApiError(400, "unknown_parameter", f"unknown query parameter {name!r}")


def lease_id_of(request: web.Request) -> LeaseId:
    """The `{leaseId}` path segment, if it has the shape of an id the store issues."""
    lease_id = parse_lease_id(request.match_info["lease_id"])
    if lease_id is None:
        raise DiscoveryApiError(
            400, "invalid_lease_id", "not a lease id (22 URL-safe base64 characters)"
        )
    return lease_id


async def read_body(request: web.Request, model: type[Body]) -> Body:
    """The JSON body validated as `model` (415, 413 or 400 otherwise)."""
    if not _is_json(request):
        raise DiscoveryApiError(415, "unsupported_media_type", "send the body as application/json")
    raw = await _body(request)
    try:
        return model.model_validate_json(raw)
    except ValidationError as error:
        raise _body_error(error) from None


def _is_json(request: web.Request) -> bool:
    # The exact header needs no parsing; anything else is parsed as aiohttp does.
    if request.headers.get(hdrs.CONTENT_TYPE) == JSON:
        return True
    return request.content_type == JSON


async def _body(request: web.Request) -> bytes:
    """The request body, at most `client_max_size` bytes (413 otherwise)."""
    payload = request.content
    if not payload.is_eof():
        return await request.read()
    # The whole body has arrived (a small one usually comes with the headers): take it
    # from the buffer rather than through request.read()'s loop of awaited chunks.
    raw = payload.read_nowait()
    if request.client_max_size and len(raw) > request.client_max_size:
        raise web.HTTPRequestEntityTooLarge(request.client_max_size, len(raw))
    return raw


def _body_error(error: ValidationError) -> DiscoveryApiError:
    problems = error.errors(include_url=False, include_input=False)
    if any(problem["type"] == "json_invalid" for problem in problems):
        return DiscoveryApiError(400, "invalid_json", "the body is not valid JSON")
    if any(problem["loc"] == ("result",) for problem in problems):
        return DiscoveryApiError(400, "invalid_result", "result must be ok, rate_limited or banned")
    shown = "; ".join(_describe(problem) for problem in problems[:_MAX_REPORTED_ERRORS])
    more = len(problems) - _MAX_REPORTED_ERRORS
    return DiscoveryApiError(
        400, "invalid_request", shown + (f"; and {more} more" if more > 0 else "")
    )


def _describe(problem: ErrorDetails) -> str:
    where = ".".join(str(part) for part in problem["loc"]) or "body"
    return f"{where}: {problem['msg']}"
