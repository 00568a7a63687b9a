"""Two replicas' consoles over one real Redis show the same numbers.

Each replica serves its own discovery API and console over a RedisLeaseStore
and a RedisTally on one prefix. A crawler leases and reports through each
replica's API; both consoles then show the same leases per proxy, cooldowns,
bans in the last day, rate-limited and banned shares, fleet pace and leases per
site, the live leases with their token's name, and the same history of the
site's pace.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from typing import Any

import httpx
import pytest

from egress_proxies.clock import SystemClock
from egress_proxies.console import History, RedisTally
from egress_proxies.leases import RedisLeaseStore
from harness.console import ConsoleSite, proxy_body, served_console
from harness.redis import RedisServer
from tests.console.conftest import CRAWLER, Tokens

pytestmark = pytest.mark.integration

SITE = "shop.example"


@pytest.fixture
def replicas(
    redis_server: RedisServer, redis_prefix: str, tokens: Tokens
) -> Iterator[tuple[ConsoleSite, ConsoleSite]]:
    users = tokens.users()
    with ExitStack() as stack:
        sites = [
            stack.enter_context(
                served_console(
                    lambda: users,
                    frozenset({tokens.crawler}),
                    crawler_names={tokens.crawler: CRAWLER},
                    history=History(interval=1.0, span=30.0),
                    store=RedisLeaseStore(redis_server.url, prefix=redis_prefix, timeout=2.0),
                    tally=RedisTally(
                        redis_server.url, prefix=redis_prefix, timeout=2.0, clock=SystemClock()
                    ),
                )
            )
            for _ in range(2)
        ]
        for site in sites:  # both replicas watch the same fleet
            site.put(proxy_body("a", max_leases=3, latency_millis=5))
            site.put(proxy_body("b", latency_millis=50))
        yield sites[0], sites[1]


def shown(site: ConsoleSite, tokens: Tokens) -> dict[str, Any]:
    """The numbers a replica's console shows: per proxy, per site, the cooling pairs."""
    headers = {"Authorization": f"Bearer {tokens.viewer}"}
    with httpx.Client(base_url=f"{site.console}/console/api/v1", headers=headers) as api:
        fleet, sites, cooling, leases = (
            api.get(path).json() for path in ("/fleet", "/sites", "/cooldowns", "/leases")
        )
    return {
        "proxies": {
            p["key"]: (p["leases"], p["cooldowns"], p["bansLastDay"]) for p in fleet["proxies"]
        },
        "sites": {
            s["target"]: (
                s["reports"],
                s["rateLimitedShare"],
                s["bannedShare"],
                s["fleetPace"],
                s["leases"],
                s["proxies"],
            )
            for s in sites["sites"]
        },
        "leases": [
            (lease["holder"], lease["proxy"], lease["target"]) for lease in leases["leases"]
        ],
        "cooling": sorted((c["proxy"], c["target"], c["kind"]) for c in cooling["cooldowns"]),
    }


def wait_for(condition: Callable[[], bool], timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.1)


def test_both_replicas_consoles_show_the_fleets_numbers(
    replicas: tuple[ConsoleSite, ConsoleSite], tokens: Tokens
) -> None:
    first, second = replicas
    auth = {"Authorization": f"Bearer {tokens.crawler}"}
    with (
        httpx.Client(base_url=first.discovery, headers=auth) as via_first,
        httpx.Client(base_url=second.discovery, headers=auth) as via_second,
    ):
        held = via_first.post("/v1/leases", json={"ttlSeconds": 120, "target": SITE}).json()
        assert held["proxy"]["name"] == "a"
        lease = f"/v1/leases/{held['leaseId']}/report"
        assert via_first.post(lease, json={"result": "ok", "count": 8}).status_code == 200
        assert via_first.post(lease, json={"result": "rate_limited"}).status_code == 200
        banned = via_second.post("/v1/leases", json={"ttlSeconds": 120, "target": SITE}).json()
        assert banned["proxy"]["name"] == "b"
        report = f"/v1/leases/{banned['leaseId']}/report"
        assert via_second.post(report, json={"result": "banned"}).status_code == 200
        via_second.delete(f"/v1/leases/{banned['leaseId']}")

    def agree() -> bool:
        first_shows, second_shows = shown(first, tokens), shown(second, tokens)
        pace = first_shows["sites"].get(SITE, (None,) * 4)[3]  # the fleet's, whatever it is
        expected = {
            "proxies": {"crawl/a": (1, 1, 0), "crawl/b": (0, 1, 1)},
            "sites": {SITE: ({"ok": 8, "rateLimited": 1, "banned": 1}, 0.1, 0.1, pace, 1, 2)},
            "cooling": [("crawl/a", SITE, "rate_limited"), ("crawl/b", SITE, "banned")],
            "leases": [(CRAWLER, "crawl/a", SITE)],
        }
        return bool(pace) and first_shows == expected == second_shows

    wait_for(agree)

    def pace_history(site: ConsoleSite) -> list[tuple[float, float | None]]:
        answer = httpx.get(
            f"{site.console}/console/api/v1/sites/{SITE}",
            headers={"Authorization": f"Bearer {tokens.viewer}"},
        ).json()["paceHistory"]
        return list(zip(answer["times"], answer["values"], strict=True))

    def same_history() -> bool:
        # Both rings hold the same samples, each at its interval's start; compare the
        # samples both have (one replica may be an interval ahead) once there are some.
        first_has, second_has = dict(pace_history(first)), dict(pace_history(second))
        common = first_has.keys() & second_has.keys()
        paced = [at for at in common if first_has[at]]
        return len(paced) >= 2 and all(first_has[at] == second_has[at] for at in common)

    wait_for(same_history)
