"""Bearer authentication: on, off, rotation without restart, and reading tokens from a Secret."""

from __future__ import annotations

import base64
import logging
from pathlib import Path

import pytest

from egress_proxies.clock import ManualClock
from egress_proxies.discovery import InvalidTokenSecretError, tokens_from_secret_data
from egress_proxies.discovery.auth import BearerAuth, named_tokens_from_secret_data
from egress_proxies.discovery.token_files import TokenDirectory
from tests.discovery.discovery_helpers import Tokens, new_token, serve_api

pytestmark = pytest.mark.integration


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"Authorization": "Bearer not-the-token-at-all"},
        {"Authorization": "Basic dXNlcjpwYXNz"},
        {"Authorization": "Bearer"},
        {"Authorization": "Bearer ünïcode-tøken"},
    ],
)
async def test_requests_without_a_valid_token_are_refused(headers: dict[str, str]) -> None:
    async with serve_api() as api:
        response = await api.client.get("/v1/proxies", headers=headers)
        assert response.status == 401
        assert (await response.json())["error"] == "unauthorized"
        assert response.headers["WWW-Authenticate"].startswith("Bearer")
        refused = await api.client.post("/v1/leases", json={"ttlSeconds": 5}, headers=headers)
        assert refused.status == 401


async def test_health_readiness_and_the_document_need_no_token() -> None:
    async with serve_api() as api:
        assert (await api.client.get("/healthz")).status == 200
        assert (await api.client.get("/readyz")).status != 401
        assert (await api.client.get("/openapi.json")).status == 200


async def test_tokens_rotate_without_a_restart() -> None:
    old, new = new_token(), new_token()
    tokens = Tokens(frozenset({old}))
    async with serve_api(tokens=tokens) as api:
        assert (await api.client.get("/v1/proxies", headers=tokens.headers(old))).status == 200
        tokens.current = frozenset({old, new})
        for token in (old, new):
            assert (
                await api.client.get("/v1/proxies", headers=tokens.headers(token))
            ).status == 200
        tokens.current = frozenset({new})
        assert (await api.client.get("/v1/proxies", headers=tokens.headers(old))).status == 401
        assert (await api.client.get("/v1/proxies", headers=tokens.headers(new))).status == 200


async def test_no_tokens_refuses_everything_unless_explicitly_allowed(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="egress_proxies.discovery.auth")
    async with serve_api(tokens=Tokens(frozenset())) as api:
        assert (await api.client.get("/v1/proxies")).status == 401
    assert (
        "no valid tokens: every request except /healthz, /readyz and /openapi.json is refused"
        in caplog.text
    )
    caplog.clear()
    async with serve_api(tokens=Tokens(frozenset()), allow_no_auth=True) as api:
        assert (await api.client.get("/v1/proxies")).status == 200
    assert "authentication is DISABLED" in caplog.text


async def test_allowing_no_auth_still_checks_tokens_once_there_are_some() -> None:
    tokens = Tokens(frozenset())
    async with serve_api(tokens=tokens, allow_no_auth=True) as api:
        assert (await api.client.get("/v1/proxies")).status == 200
        tokens.current = frozenset({new_token()})
        assert (await api.client.get("/v1/proxies")).status == 401
        assert (await api.client.get("/v1/proxies", headers=tokens.headers())).status == 200


def test_secret_data_yields_one_token_per_key() -> None:
    first, second = new_token(), new_token()
    data = {"current": b64(first + "\n"), "next": b64(second), "retired": ""}
    assert tokens_from_secret_data(data) == {first, second}
    assert tokens_from_secret_data(None) == frozenset()


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("%%%not-base64", "not base64"),
        (base64.b64encode(b"\xff\xfe" * 10).decode(), "not base64"),
        (b64("has a space in the middle"), "whitespace"),
        (b64("short"), "shorter"),
    ],
)
def test_broken_secret_entries_are_refused_by_key_never_by_value(value: str, problem: str) -> None:
    with pytest.raises(InvalidTokenSecretError, match=problem) as raised:
        tokens_from_secret_data({"good": b64(new_token()), "bad-key": value})
    assert "bad-key" in str(raised.value)
    assert value not in str(raised.value)


def test_a_token_is_named_by_its_key_and_the_check_returns_the_name(tmp_path: Path) -> None:
    first, second = new_token(), new_token()
    (tmp_path / "crawler-a").write_text(first)
    (tmp_path / "crawler-b").write_text(second + "\n")
    clock = ManualClock()
    tokens = TokenDirectory(tmp_path, clock)
    auth = BearerAuth(tokens, allow_no_auth=False, names=tokens.names)

    assert auth.check(f"Bearer {first}") == "crawler-a"
    assert auth.check(f"Bearer {first}") == "crawler-a"  # the remembered header, too
    assert auth.check(f"bearer  {second} ") == "crawler-b"
    (tmp_path / "crawler-a").rename(tmp_path / "team-x")
    clock.advance(1.0)
    assert auth.check(f"Bearer {first}") == "team-x"
    assert "crawler-a" not in tokens.names().values()
    assert BearerAuth(tokens, allow_no_auth=False).check(f"Bearer {second}") is None


def test_named_tokens_map_each_token_to_its_key() -> None:
    first = new_token()
    assert named_tokens_from_secret_data({"crawler-a": b64(first), "retired": ""}) == {
        first: "crawler-a"
    }
