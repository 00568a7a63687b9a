"""`python -m egress_proxies.discovery` prints the OpenAPI document (for docs/openapi.json)."""

from egress_proxies.discovery.openapi import render_openapi

print(render_openapi(), end="")
