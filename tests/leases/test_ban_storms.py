"""The ban-storm guard and rate-limit cooldowns as pure bookkeeping, in plain numbers."""

from __future__ import annotations

import pytest

from egress_proxies.catalog import ProxyKey, proxy_key
from egress_proxies.leases import BanStorms, ReportResult
from egress_proxies.leases.cooldowns import Cooldowns

pytestmark = pytest.mark.unit

POOL = frozenset(proxy_key("crawl", f"p{i}") for i in range(4))
P0, P1, P2, P3 = sorted(POOL)


def ban(storms: BanStorms, key: ProxyKey, now: float, target: str = "t") -> float | None:
    return storms.record_ban(target, key, POOL, len(POOL), now)


def test_more_than_the_share_inside_the_window_pauses_once() -> None:
    storms = BanStorms(share=0.5, window=60, pause=120)
    assert ban(storms, P0, 0) is None
    assert ban(storms, P1, 10) is None, "2 of 4 is not more than half"
    assert ban(storms, P2, 20) == 140
    assert storms.paused_until("t", 139) == 140
    assert ban(storms, P3, 30) is None, "already paused: no second pause"
    assert storms.paused_until("t", 140) is None
    assert storms.paused_count(140) == 0


def test_bans_outside_the_window_do_not_add_up() -> None:
    storms = BanStorms(share=0.5, window=60, pause=120)
    for at, key in ((0, P0), (61, P1), (122, P2)):
        assert ban(storms, key, at) is None


def test_the_same_proxy_banned_twice_counts_once_and_targets_are_separate() -> None:
    storms = BanStorms(share=0.5, window=60, pause=120)
    for at in range(5):
        assert ban(storms, P0, at) is None
    assert ban(storms, P1, 5, target="other") is None
    assert ban(storms, P2, 6) is None


def test_a_pool_of_one_never_storms() -> None:
    storms = BanStorms(share=0.5, window=60, pause=120)
    alone = frozenset({P0})
    assert storms.record_ban("t", P0, alone, 1, 0) is None


def test_impossible_settings_are_refused() -> None:
    with pytest.raises(ValueError, match="share"):
        BanStorms(share=0)


def test_rate_limits_grow_only_on_repeats_after_the_cooldown_ended() -> None:
    cooldowns = Cooldowns(window=300, backoff_cap=3600, rate_window=30)
    pair = (P0, "t")
    cooldowns.record(pair, ReportResult.RATE_LIMITED, 0)
    cooldowns.record(pair, ReportResult.RATE_LIMITED, 10)
    assert cooldowns.cooling_until(P0, "t", 10) == 40, "a report while cooling extends, not doubles"
    cooldowns.record(pair, ReportResult.RATE_LIMITED, 40)
    assert cooldowns.cooling_until(P0, "t", 40) == 100, "a repeat after the cooldown doubles"
    cooldowns.record(pair, ReportResult.RATE_LIMITED, 100, retry_after=5)
    assert cooldowns.cooling_until(P0, "t", 100) == 105, "the site's Retry-After wins"
    cooldowns.record(pair, ReportResult.BANNED, 105)
    cooldowns.record(pair, ReportResult.RATE_LIMITED, 110, retry_after=1)
    assert cooldowns.cooling_until(P0, "t", 110) == 405, "a rate limit never shortens a ban"
