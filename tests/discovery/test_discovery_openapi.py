"""The OpenAPI document: checked in, served, and honoured under a property-based run."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis import GenerationMode
from schemathesis.config import SchemathesisConfig
from schemathesis.generation.case import Case

from egress_proxies.discovery import render_openapi
from tests.discovery.discovery_helpers import Tokens, record, serve_api, serve_api_in_thread

pytestmark = pytest.mark.integration

CHECKED_IN = Path(__file__).parents[2] / "docs" / "openapi.json"
MIN_REQUESTS = 1000
POSITIVE, NEGATIVE = GenerationMode.POSITIVE, GenerationMode.NEGATIVE
# Generated requests per operation and mode, weighted towards what is cheap to generate.
# The attribute filter is an exploded query object (`attr.<k>=<v>` parameters). Schemathesis
# negates it into wire requests that are still valid (a null value vanishes) or longer than
# aiohttp's 8 KiB request line (answered by the HTTP parser before the app runs), so that
# operation is fuzzed with valid inputs only; its refusals are covered in test_discovery_api.
EXAMPLES = {
    ("GET /healthz", POSITIVE): 1,
    ("GET /openapi.json", POSITIVE): 1,
    ("GET /readyz", POSITIVE): 5,
    ("GET /v1/proxies", POSITIVE): 50,
    ("GET /v1/proxies/{namespace}/{name}/revocations", POSITIVE): 20,
    ("POST /v1/leases", POSITIVE): 420,
    ("POST /v1/leases", NEGATIVE): 80,
    ("DELETE /v1/leases/{leaseId}", POSITIVE): 40,
    ("DELETE /v1/leases/{leaseId}", NEGATIVE): 50,
    ("POST /v1/leases/{leaseId}/report", POSITIVE): 320,
    ("POST /v1/leases/{leaseId}/report", NEGATIVE): 80,
    ("POST /v1/leases/{leaseId}/renew", POSITIVE): 60,
    ("POST /v1/leases/{leaseId}/renew", NEGATIVE): 40,
}


async def test_the_checked_in_document_is_the_served_one() -> None:
    async with serve_api() as api:
        served = await (await api.client.get("/openapi.json")).text()
    assert served == CHECKED_IN.read_text(), (
        "docs/openapi.json is stale: python -m egress_proxies.discovery > docs/openapi.json"
    )
    assert served == render_openapi()


def test_generated_requests_never_get_5xx_or_off_schema_answers() -> None:
    tokens = Tokens()
    fleet = [
        record("eu-1", attributes={"region": "eu"}),
        record("eu-2", attributes={"region": "eu"}, max_leases=50),
        record("down", attributes={"region": "eu"}, healthy=False),
        record("ext", credentials=None, managed=False),
    ]
    config = SchemathesisConfig.from_dict({"generation": {"with-security-parameters": False}})
    sent = 0
    with serve_api_in_thread(*fleet, tokens=tokens) as base_url, requests.Session() as session:
        document: dict[str, Any] = session.get(f"{base_url}/openapi.json").json()
        schema = schemathesis.openapi.from_dict(document, config=config)
        labels = {f"{m.upper()} {p}" for p, methods in document["paths"].items() for m in methods}
        assert {label for label, _ in EXAMPLES} == labels
        for (label, mode), examples in EXAMPLES.items():
            method, path = label.split(" ")
            operation = schema[path][method]

            @settings(
                max_examples=examples,
                deadline=None,
                database=None,
                suppress_health_check=list(HealthCheck),
            )
            @given(case=operation.as_strategy(generation_mode=mode))
            def call(case: Case[Any]) -> None:
                nonlocal sent
                sent += 1
                case.call_and_validate(base_url=base_url, session=session, headers=tokens.headers())

            call()
    assert sent >= MIN_REQUESTS, f"only {sent} generated requests"


def test_the_document_is_valid_json_with_every_schema_resolvable() -> None:
    document = json.loads(CHECKED_IN.read_text())
    schemas = document["components"]["schemas"]
    references = {
        value.removeprefix("#/components/schemas/")
        for value in _walk(document)
        if isinstance(value, str) and value.startswith("#/components/schemas/")
    }
    assert references <= set(schemas)


def _walk(node: Any) -> Any:
    if isinstance(node, dict):
        for value in node.values():
            yield from _walk(value)
    elif isinstance(node, list):
        for value in node:
            yield from _walk(value)
    else:
        yield node
