"""The discovery + lease HTTP API for crawlers.

    app = create_app(catalog, store, tokens, metrics=lease_metrics)
    runner = await start(app, "0.0.0.0", 8090)   # ... await runner.cleanup()

`tokens` returns the valid bearer tokens and is called per request; feed it
from the token Secret with `tokens_from_secret_data(secret["data"])`.
"""

from egress_proxies.discovery.app import DEFAULT_PORT, MAX_BODY_BYTES, create_app, start
from egress_proxies.discovery.auth import (
    InvalidTokenSecretError,
    TokenSource,
    tokens_from_secret_data,
)
from egress_proxies.discovery.handlers import LeaseRequestRecorder
from egress_proxies.discovery.openapi import openapi_document, render_openapi

__all__ = [
    "DEFAULT_PORT",
    "MAX_BODY_BYTES",
    "InvalidTokenSecretError",
    "LeaseRequestRecorder",
    "TokenSource",
    "create_app",
    "openapi_document",
    "render_openapi",
    "start",
    "tokens_from_secret_data",
]
