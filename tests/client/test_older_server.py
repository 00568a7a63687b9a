"""A client newer than its server: the optional fields the server does not take yet are
dropped (once, with a warning), and the rest works as before."""

from __future__ import annotations

from typing import ClassVar

import pytest
from egress_proxies_client import AsyncPool
from pydantic import BaseModel, create_model

from egress_proxies.discovery import handlers
from egress_proxies.discovery.schemas import LeaseRequest, ReportRequest
from tests.client.served import serve_async
from tests.discovery.discovery_helpers import record

pytestmark = pytest.mark.client

SITE = "shop.example"


def older(model: type[BaseModel], field: str) -> type[BaseModel]:
    """`model` as a server of the release before `field` validated it: the field is not
    taken (a 400 names it), and the handler reads its default."""
    fields = {name: (info.annotation, info) for name, info in model.model_fields.items()}
    default = fields.pop(field)[1].get_default()
    before: type[BaseModel] = create_model(  # type: ignore[call-overload]
        f"Older{model.__name__}", __base__=model.__base__, **fields
    )
    return type(before.__name__, (before,), {"__annotations__": {field: ClassVar}, field: default})


async def test_a_newer_client_drops_what_an_older_server_does_not_take(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(handlers, "LeaseRequest", older(LeaseRequest, "held"))
    monkeypatch.setattr(handlers, "ReportRequest", older(ReportRequest, "accepted_last_second"))
    async with (
        serve_async(record("a"), record("b"), record("c")) as served,
        AsyncPool(served.url, served.tokens.one, sleep=served.asleep) as pool,
    ):
        first = await pool.acquire(target=SITE)
        for held in (1, 2):
            await pool.acquire(target=SITE, held=held)
        assert served.lease_requests("rejected") == 1, "refused once, then sent without it"
        assert served.lease_requests("granted") == 3
        first.accepted()
        assert await first.observe(429, {"Retry-After": "1"}) is not None
        await first.rate_limited("http_429")
        assert served.reports("rate_limited", "http_429") == 2
    refused = [r.getMessage() for r in caplog.records if "older than this client" in r.message]
    assert refused == [
        "the API is older than this client: it does not take 'held'",
        "the API is older than this client: it does not take 'acceptedLastSecond'",
    ]
