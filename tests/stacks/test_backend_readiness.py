"""The operator's readiness follows its state backend: a real PostgreSQL stopped, refusing a
password, and back; /readyz is 503 `unavailable` meanwhile, and nothing shows the password."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest
from aiohttp.test_utils import TestClient, TestServer

from egress_proxies.catalog.fleet import Fleet
from egress_proxies.clock import SystemClock
from egress_proxies.discovery import create_app
from egress_proxies.leases import MemoryLeaseStore
from egress_proxies.operator.backend_watch import BackendWatch
from egress_proxies.stacks.backends import open_backend, parse_backend_url
from egress_proxies.stacks.naming import PROJECT
from harness.postgres import PostgresServer

pytestmark = pytest.mark.integration

PASSWORD = "readiness-password-4711"


@pytest.fixture
def own_postgres(monkeypatch: pytest.MonkeyPatch) -> Iterator[PostgresServer]:
    with PostgresServer(password=PASSWORD) as server:
        monkeypatch.setenv("PGPASSWORD", PASSWORD)
        yield server


async def test_readiness_is_false_while_the_backend_fails_and_true_when_it_returns(
    own_postgres: PostgresServer,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    tmp_path: object,
) -> None:
    backend = open_backend(parse_backend_url(own_postgres.url), own_postgres.run_dir, PROJECT)
    watch = BackendWatch(backend, SystemClock())
    app = create_app(Fleet(), MemoryLeaseStore(), frozenset, blocked=lambda: watch.problem)
    async with TestClient(TestServer(app)) as client:
        assert (await client.get("/readyz")).status == 503, "not ready before the first check"
        assert await watch.check() is None
        assert (await client.get("/readyz")).status == 200

        own_postgres.stop()
        with caplog.at_level(logging.WARNING):
            await watch.check()  # may still see the dropped connection rather than the refusal
            problem = await watch.check()
            assert problem is not None
            logged = len(caplog.records)
            assert await watch.check() == problem
            assert len(caplog.records) == logged, "the same failure is logged once"
        response = await client.get("/readyz")
        assert response.status == 503
        body = await response.json()
        assert body["error"] == "unavailable"
        assert "127.0.0.1" in body["detail"]
        errors = [r for r in caplog.records if r.levelno == logging.ERROR]
        assert errors
        assert all("\n" not in r.getMessage() for r in errors)

        own_postgres.start()
        monkeypatch.setenv("PGPASSWORD", "not-the-password")
        problem = await watch.check()
        assert problem is not None
        assert "password authentication failed" in problem
        assert (await client.get("/readyz")).status == 503

        monkeypatch.setenv("PGPASSWORD", PASSWORD)
        assert await watch.check() is None
        assert (await client.get("/readyz")).status == 200
    assert PASSWORD not in caplog.text
    assert "not-the-password" not in caplog.text
