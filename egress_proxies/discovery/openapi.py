"""The OpenAPI 3.1 document of the API, generated from the pydantic models in `schemas`.

The served document states this server's maximum TTL; `docs/openapi.json` is the
one for the default maximum. Regenerate it with:

    python -m egress_proxies.discovery > docs/openapi.json
"""

from __future__ import annotations

import json
from typing import Any

from pydantic.json_schema import models_json_schema

from egress_proxies.discovery.schemas import (
    ErrorBody,
    Health,
    LeaseGranted,
    LeaseRequest,
    NoMatchBody,
    ProxyList,
    RenewRequest,
    ReportAccepted,
    ReportRequest,
    Revocations,
)
from egress_proxies.leases import DEFAULT_MAX_TTL, LEASE_ID_PATTERN

JsonObject = dict[str, Any]

_REF = "#/components/schemas/{model}"


def _json(description: str, schema: JsonObject) -> JsonObject:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def _ref(model: str) -> JsonObject:
    return {"$ref": _REF.format(model=model)}


def _error(description: str) -> JsonObject:
    return _json(description, _ref("ErrorBody"))


_BAD_REQUEST = _error("Malformed request: invalid JSON, parameter or field (see `error`).")
_UNAUTHORIZED = _error("Missing or invalid bearer token.")
_TOO_LARGE = _error("Body larger than 64 KiB.")
_WRONG_TYPE = _error("Body not sent as application/json.")
_OTHER = _error("Any other refusal, always with an {error, detail} body.")
_NO_CONTENT = {"description": "Done."}

_LEASE_ID_PARAMETER: JsonObject = {
    "name": "leaseId",
    "in": "path",
    "required": True,
    "description": "The leaseId returned when the lease was granted.",
    "schema": {"type": "string", "pattern": LEASE_ID_PATTERN},
}


def _body(model: str) -> JsonObject:
    return {"required": True, "content": {"application/json": {"schema": _ref(model)}}}


def _paths() -> JsonObject:
    return {
        "/healthz": {
            "get": {
                "operationId": "health",
                "summary": "Liveness; needs no token.",
                "security": [],
                "responses": {"200": _json("Serving.", _ref("Health")), "default": _OTHER},
            }
        },
        "/readyz": {
            "get": {
                "operationId": "ready",
                "summary": "Readiness: the fleet is synced and the lease store answers; "
                "needs no token.",
                "security": [],
                "responses": {
                    "200": _json("Ready.", _ref("Health")),
                    "503": _error(
                        "The lease store does not answer (store_unavailable), the "
                        "separate discovery tier has not listed the fleet yet (not_synced), "
                        "or the operator's state backend fails (unavailable)."
                    ),
                    "default": _OTHER,
                },
            }
        },
        "/openapi.json": {
            "get": {
                "operationId": "openapi",
                "summary": "This document; needs no token.",
                "security": [],
                "responses": {
                    "200": _json("The OpenAPI document.", {"type": "object"}),
                    "default": _OTHER,
                },
            }
        },
        "/v1/proxies": {
            "get": {
                "operationId": "listProxies",
                "summary": "Proxies matching attribute filters, with their active lease counts.",
                "parameters": [
                    {
                        "name": "attributes",
                        "in": "query",
                        "style": "form",
                        "explode": True,
                        "description": "One `attr.<key>=<value>` parameter per attribute "
                        "a proxy must carry (each key at most once).",
                        "schema": {
                            "type": "object",
                            "propertyNames": {"pattern": r"^attr\..{1,253}$"},
                            "additionalProperties": {"type": "string", "maxLength": 253},
                            "maxProperties": 64,
                        },
                    },
                    {
                        "name": "healthy",
                        "in": "query",
                        "description": "true: only proxies a lease could be granted on "
                        "(healthy, not being deleted); false: only the others.",
                        "schema": {"type": "string", "enum": ["true", "false"]},
                    },
                ],
                "responses": {
                    "200": _json("Matching proxies, sorted by namespace/name.", _ref("ProxyList")),
                    "400": _BAD_REQUEST,
                    "401": _UNAUTHORIZED,
                    "default": _OTHER,
                },
            }
        },
        "/v1/proxies/{namespace}/{name}/revocations": {
            "get": {
                "operationId": "proxyRevocations",
                "summary": "What a managed proxy's squid pulls every second to check lease "
                "credentials: leases released, leases renewed, tokens valid. Signed with the "
                "proxy's key instead of a bearer token.",
                "security": [{"proxySignature": []}],
                "parameters": [
                    {"name": part, "in": "path", "required": True, "schema": {"type": "string"}}
                    for part in ("namespace", "name")
                ],
                "responses": {
                    "200": _json("The proxy's revocation list.", _ref("Revocations")),
                    "403": _error("Not a managed proxy's, or not signed with its key."),
                    "503": _error("The lease store is unavailable: the proxy keeps its last list."),
                    "default": _OTHER,
                },
            }
        },
        "/v1/leases": {
            "post": {
                "operationId": "acquireLease",
                "summary": "Lease the least-loaded healthy proxy matching the selector.",
                "description": "Among healthy matches with room for the target (fewer "
                "than maxLeases leases for it, and fewer than maxTargets other targets "
                "when it holds none for it) and not cooling down for it: fewest active "
                "leases for the target, then in all, then latency, then namespace/name. "
                "The lease carries its pace: how many requests per second to send "
                "through the proxy to the target.",
                "requestBody": _body("LeaseRequest"),
                "responses": {
                    "201": _json("Leased.", _ref("LeaseGranted")),
                    "400": _BAD_REQUEST,
                    "401": _UNAUTHORIZED,
                    "409": {
                        **_json(
                            "No matching proxy is free, or the target is paused, or it holds "
                            "as many leases as its bounds allow.",
                            _ref("NoMatchBody"),
                        ),
                        "headers": {
                            "Retry-After": {
                                "description": "Seconds until the earliest matching proxy may "
                                "free up (for a full target: until its first lease ends); "
                                "absent when no matching proxy is healthy.",
                                "schema": {"type": "integer", "minimum": 1},
                            }
                        },
                    },
                    "413": _TOO_LARGE,
                    "415": _WRONG_TYPE,
                    "default": _OTHER,
                },
            }
        },
        "/v1/leases/{leaseId}": {
            "delete": {
                "operationId": "releaseLease",
                "summary": "End a lease. Idempotent: unknown and ended leases also answer 204.",
                "parameters": [_LEASE_ID_PARAMETER],
                "responses": {
                    "204": _NO_CONTENT,
                    "400": _BAD_REQUEST,
                    "401": _UNAUTHORIZED,
                    "default": _OTHER,
                },
            }
        },
        "/v1/leases/{leaseId}/report": {
            "post": {
                "operationId": "reportLease",
                "summary": "Report how the proxy fared against a target.",
                "description": "rate_limited and banned put {proxy, target} on cooldown: "
                "rate limits for the site's retryAfterSeconds or a short growing window, bans "
                "for a window that doubles on repeats. Bans from most of a pool pause the "
                "target. ok reports (with a count of requests) raise the pair's pace, "
                "rate_limited lowers it, to below what the site accepted in the second "
                "before (acceptedLastSecond) if the client counted it; the answer carries the "
                "holder's pace after the report. "
                "Accepted while the lease is active and for one cooldown window after it ends.",
                "parameters": [_LEASE_ID_PARAMETER],
                "requestBody": _body("ReportRequest"),
                "responses": {
                    "200": _json("Recorded; the pace after it.", _ref("ReportAccepted")),
                    "400": _BAD_REQUEST,
                    "401": _UNAUTHORIZED,
                    "404": _error("Unknown lease, or it ended more than a cooldown window ago."),
                    "413": _TOO_LARGE,
                    "415": _WRONG_TYPE,
                    "default": _OTHER,
                },
            }
        },
        "/v1/leases/{leaseId}/renew": {
            "post": {
                "operationId": "renewLease",
                "summary": "Extend an active lease to end ttlSeconds from now.",
                "parameters": [_LEASE_ID_PARAMETER],
                "requestBody": _body("RenewRequest"),
                "responses": {
                    "200": _json("Renewed.", _ref("LeaseGranted")),
                    "400": _BAD_REQUEST,
                    "401": _UNAUTHORIZED,
                    "404": _error("Unknown lease, or it has ended."),
                    "413": _TOO_LARGE,
                    "415": _WRONG_TYPE,
                    "default": _OTHER,
                },
            }
        },
    }


def openapi_document(max_ttl: int) -> JsonObject:
    """The document for a server whose longest lease is `max_ttl` seconds."""
    _, definitions = models_json_schema(
        [
            (LeaseRequest, "validation"),
            (ReportRequest, "validation"),
            (RenewRequest, "validation"),
            (LeaseGranted, "serialization"),
            (ReportAccepted, "serialization"),
            (NoMatchBody, "serialization"),
            (ProxyList, "serialization"),
            (ErrorBody, "serialization"),
            (Health, "serialization"),
            (Revocations, "serialization"),
        ],
        ref_template=_REF,
    )
    schemas = definitions["$defs"]
    schemas["LeaseRequest"]["properties"]["ttlSeconds"]["maximum"] = max_ttl
    schemas["RenewRequest"]["properties"]["ttlSeconds"]["maximum"] = max_ttl
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "egress-proxies discovery API",
            "version": "v1",
            "description": "Find, lease, release and report on egress proxies. "
            "Every error is a JSON {error, detail} body.",
        },
        "security": [{"bearer": []}],
        "paths": _paths(),
        "components": {
            "schemas": schemas,
            "securitySchemes": {
                "bearer": {"type": "http", "scheme": "bearer"},
                "proxySignature": {
                    "type": "apiKey",
                    "in": "header",
                    "name": "X-Proxy-Signature",
                    "description": "`<unix seconds>.<hex HMAC-SHA256 of "
                    "'revocations|<namespace>/<name>|<unix seconds>' with the proxy's "
                    "signing key>`, within 60 s of the server's clock.",
                },
            },
        },
    }


def render_openapi(max_ttl: int = DEFAULT_MAX_TTL) -> str:
    """The document as the server serves it and as docs/openapi.json holds it."""
    return json.dumps(openapi_document(max_ttl), indent=2) + "\n"
