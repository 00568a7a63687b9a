"""Lease credentials: issued per grant and renewal, revoked through the proxy's signed list,
and checked by the squid helper (real Perl) against a served API."""

from __future__ import annotations

import subprocess
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from aiohttp.typedefs import Handler

from egress_proxies.discovery import create_app
from egress_proxies.leases import MemoryLeaseStore, RedisLeaseStore
from egress_proxies.leases.credentials import (
    lease_credentials,
    lease_handle,
    revocations_signature,
    token_tag,
)
from egress_proxies.stacks.programs.squid_config import HELPER_FILE, PERL, lease_auth_helper
from egress_proxies.values import ProxyCredentials, ProxyKey
from harness.redis import RedisServer
from tests.conftest import wait_for
from tests.discovery.discovery_helpers import Api, Tokens, new_token, record, serve_api
from tests.fakes import ListCatalog

pytestmark = pytest.mark.integration

KEY = "a" * 64
OPERATOR = ProxyCredentials("crawler", "operator-only", KEY)
SIGNING = record("door", credentials=OPERATOR)
EXTERNAL = record("ext", managed=False, credentials=ProxyCredentials("ext-user", "ext-pass"))
REVOCATIONS = "/v1/proxies/crawl/door/revocations"


def signed(proxy: str = "crawl/door", key: str = KEY) -> dict[str, str]:
    return {"X-Proxy-Signature": revocations_signature(key, ProxyKey(proxy), int(time.time()))}


async def revocations(api: Api) -> dict[str, Any]:
    response = await api.client.get(REVOCATIONS, headers=signed())
    assert response.status == 200, await response.text()
    body: dict[str, Any] = await response.json()
    return body


async def test_a_grant_carries_credentials_of_its_own_and_a_renewal_new_ones() -> None:
    async with serve_api(SIGNING) as api:
        lease = await api.lease(selector={}, ttlSeconds=30)
        credentials = lease["proxy"]["credentials"]
        expected = lease_credentials(
            KEY, SIGNING.key, lease["leaseId"], api.clock.time() + 30, api.tokens.one
        )
        assert credentials == {"username": expected.username, "password": expected.password}
        assert "operator-only" not in str(lease)
        assert lease["proxy"]["urlWithCredentials"] == (
            f"http://{expected.username}:{expected.password}@127.0.0.1:3128"
        )
        api.clock.advance(10)
        response = await api.client.post(
            f"/v1/leases/{lease['leaseId']}/renew",
            json={"ttlSeconds": 60},
            headers=api.tokens.headers(),
        )
        renewed = (await response.json())["proxy"]["credentials"]
        assert renewed["username"] == expected.username.replace(
            str(int(api.clock.time()) + 20), str(int(api.clock.time()) + 60)
        )
        # An older client that kept the first credentials: the proxy learns the new end.
        assert (await revocations(api))["renewed"] == {
            lease_handle(lease["leaseId"]): int(api.clock.time()) + 60
        }


async def test_an_external_proxy_hands_out_its_configured_credentials() -> None:
    async with serve_api(EXTERNAL) as api:
        lease = await api.lease(selector={})
        assert lease["proxy"]["credentials"] == {"username": "ext-user", "password": "ext-pass"}


async def test_the_revocation_list_answers_only_the_proxys_own_signature() -> None:
    async with serve_api(SIGNING, EXTERNAL) as api:
        for headers in (
            {},
            {"X-Proxy-Signature": "garbage"},
            signed(key="b" * 64),
            {"X-Proxy-Signature": revocations_signature(KEY, SIGNING.key, 1)},  # too old
            api.tokens.headers(),
        ):
            response = await api.client.get(REVOCATIONS, headers=headers)
            assert response.status == 403
            assert (await response.json())["error"] == "forbidden"
        unknown = await api.client.get("/v1/proxies/crawl/nope/revocations", headers=signed())
        external = await api.client.get(
            "/v1/proxies/crawl/ext/revocations", headers=signed("crawl/ext")
        )
        assert (unknown.status, external.status) == (403, 403)


async def test_release_and_a_ban_revoke_and_a_removed_token_loses_its_tag() -> None:
    tokens = Tokens()
    async with serve_api(replace(SIGNING, max_leases=3), tokens=tokens) as api:
        released = await api.lease(selector={})
        banned = await api.lease(selector={}, target="t.example")
        kept = await api.lease(selector={})
        assert await api.release(released["leaseId"]) == 204
        assert await api.report(banned["leaseId"], "banned") == 200
        body = await revocations(api)
        assert body["revoked"] == sorted(
            lease_handle(lease["leaseId"]) for lease in (released, banned)
        )
        assert lease_handle(kept["leaseId"]) not in body["revoked"]
        assert body["tokens"] == [token_tag(KEY, tokens.one)]
        old = tokens.one
        tokens.current = frozenset({new_token()})
        assert token_tag(KEY, old) not in (await revocations(api))["tokens"]


class Helper:
    """The squid helper as squid runs it: one line in, OK or ERR out."""

    def __init__(self, tmp_path: Path, url: str) -> None:
        secrets_dir, state = tmp_path / "secret", tmp_path / "state"
        secrets_dir.mkdir()
        state.mkdir()
        for name, value in (("username", "crawler"), ("password", "op-pw"), ("signingKey", KEY)):
            (secrets_dir / name).write_text(value)
        script = tmp_path / HELPER_FILE
        script.write_text(lease_auth_helper())
        self.process = subprocess.Popen(
            [PERL, str(script), str(secrets_dir), "crawl/door", url, str(state)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )

    def ask(self, username: str, password: str) -> str:
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write(f"{username} {password}\n")
        self.process.stdin.flush()
        return self.process.stdout.readline().strip()

    def stop(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()
        self.process.wait(timeout=10)


async def test_the_helper_follows_the_api_and_keeps_its_last_list_without_it(
    tmp_path: Path,
) -> None:
    tokens = Tokens()
    app = create_app(ListCatalog(replace(SIGNING, max_leases=4)), MemoryLeaseStore(), tokens)
    (tmp_path / "h").mkdir()
    async with TestClient(TestServer(app, host="127.0.0.1")) as client:
        url = str(client.make_url(REVOCATIONS))
        helper = Helper(tmp_path / "h", url)
        try:
            headers = tokens.headers()

            async def lease(ttl: int = 60) -> dict[str, Any]:
                body = {"selector": {}, "ttlSeconds": ttl}
                response = await client.post("/v1/leases", json=body, headers=headers)
                payload: dict[str, Any] = await response.json()
                return payload

            def ask(lease: dict[str, Any]) -> str:
                return helper.ask(**lease["proxy"]["credentials"])

            def answers(lease: dict[str, Any], answer: str) -> Any:
                async def check() -> bool:
                    return ask(lease) == answer

                return wait_for(check, timeout=10, interval=0.1)

            first, second = await lease(), await lease()

            async def listed() -> bool:
                return any((tmp_path / "h" / "state").iterdir())

            await wait_for(listed, timeout=10)  # the helper holds a list without the release
            assert ask(first) == "OK"
            assert helper.ask("crawler", "op-pw") == "OK"
            assert helper.ask("crawler", "wrong") == "ERR"
            forged = {"username": first["proxy"]["credentials"]["username"], "password": "0" * 32}
            assert helper.ask(**forged) == "ERR"
            await client.delete(f"/v1/leases/{first['leaseId']}", headers=headers)
            await answers(first, "ERR")
            assert ask(second) == "OK"
            # The API stops answering: the last list stands, live leases keep working.
            await client.server.close()
            assert ask(second) == "OK"
            assert ask(first) == "ERR"
        finally:
            helper.stop()


async def test_with_the_store_down_new_leases_are_503_and_a_live_one_keeps_working(
    tmp_path: Path, own_redis: RedisServer
) -> None:
    tokens = Tokens()
    store = RedisLeaseStore(own_redis.url, prefix="doors", timeout=1.0)
    polls: list[int] = []  # the statuses the helper's polls got

    async def watch_polls(request: web.Request, handler: Handler) -> web.StreamResponse:
        response = await handler(request)
        if request.path == REVOCATIONS and "X-Proxy-Signature" in request.headers:
            polls.append(response.status)
        return response

    app = create_app(
        ListCatalog(replace(SIGNING, max_leases=4)), store, tokens, middlewares=[watch_polls]
    )
    (tmp_path / "h").mkdir()
    try:
        async with TestClient(TestServer(app, host="127.0.0.1")) as client:
            helper = Helper(tmp_path / "h", str(client.make_url(REVOCATIONS)))
            try:
                body = {"selector": {}, "ttlSeconds": 60}
                granted = await client.post("/v1/leases", json=body, headers=tokens.headers())
                lease = await granted.json()

                async def listed() -> bool:
                    return any((tmp_path / "h" / "state").iterdir())

                await wait_for(listed, timeout=10)
                assert helper.ask(**lease["proxy"]["credentials"]) == "OK"
                own_redis.stop()
                refused = await client.post("/v1/leases", json=body, headers=tokens.headers())
                assert refused.status == 503
                assert refused.headers["Retry-After"]
                seen = len(polls)

                async def polled_in_vain() -> bool:
                    return polls[seen:].count(503) >= 2

                await wait_for(polled_in_vain, timeout=10)
                assert helper.ask(**lease["proxy"]["credentials"]) == "OK"
            finally:
                helper.stop()
    finally:
        await store.close()
