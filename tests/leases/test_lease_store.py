"""The lease store suite, run against both stores: memory and a real redis-server.

Selection, capacity, expiry, release, reports, cooldowns, backoff, forgetting a
proxy: one suite, parametrised by `make_store`, so both stores keep one semantics.
"""

from __future__ import annotations

import asyncio
from collections import Counter

import pytest

from egress_proxies.clock import ManualClock
from egress_proxies.leases import (
    CandidatePool,
    InvalidTtlError,
    Lease,
    LeaseCounts,
    LeaseEnds,
    LeaseId,
    LeaseLimits,
    LeaseStore,
    NoMatch,
    ReportOutcome,
    ReportResult,
)
from tests.discovery.discovery_helpers import record
from tests.leases.lease_stores import (
    RECORDS,
    MakeStore,
    granted,
    pool,
    refused,
)

pytestmark = pytest.mark.integration

WINDOW = 60.0
CAP = 600.0


@pytest.fixture
def store(make_store: MakeStore) -> LeaseStore:
    return make_store(cooldown_window=WINDOW, max_ttl=3600, ban_backoff_cap=CAP)


async def report(
    store: LeaseStore, lease_id: LeaseId, result: ReportResult, target: str | None = None
) -> ReportOutcome | None:
    return await store.report(lease_id, result, target, None, RECORDS.get)


async def test_fewest_leases_first_then_latency_then_key(store: LeaseStore) -> None:
    fast = record("fast", latency_millis=5, max_leases=3)
    slow = record("slow", latency_millis=50, max_leases=3)
    unknown = record("unknown", latency_millis=None, max_leases=3)
    tie = record("a-tie", latency_millis=50, max_leases=3)
    candidates = pool(unknown, slow, tie, fast)
    order = [granted(await store.acquire(candidates, None, 60)).proxy.name for _ in range(5)]
    assert order == ["fast", "a-tie", "slow", "unknown", "fast"]


async def test_unhealthy_unprobed_and_deleting_proxies_are_never_offered(store: LeaseStore) -> None:
    candidates = pool(
        record("down", healthy=False),
        record("unprobed", healthy=None),
        record("leaving", deleting=True),
    )
    assert refused(await store.acquire(candidates, None, 60)) == NoMatch(
        considered=3, at_capacity=0, in_cooldown=0, unhealthy=3
    )


async def test_a_proxy_never_exceeds_its_capacity(store: LeaseStore) -> None:
    candidates = pool(record("shared", max_leases=2), record("solo"))
    names = sorted(
        [granted(await store.acquire(candidates, None, 60)).proxy.name for _ in range(3)]
    )
    assert names == ["shared", "shared", "solo"]
    assert refused(await store.acquire(candidates, None, 60)).at_capacity == 2
    assert await store.active_counts() == {"crawl/shared": 2, "crawl/solo": 1}


async def test_ttl_ends_the_lease_exactly_when_due(store: LeaseStore, clock: ManualClock) -> None:
    candidates = pool(record("only"))
    lease = granted(await store.acquire(candidates, None, 30))
    assert lease.expires_at == clock.time() + 30
    clock.advance(29.999)
    assert refused(await store.acquire(candidates, None, 30)).at_capacity == 1
    clock.advance(0.001)
    assert await store.active_counts() == {}
    assert granted(await store.acquire(candidates, None, 30)).lease_id != lease.lease_id


async def test_release_is_idempotent(store: LeaseStore) -> None:
    candidates = pool(record("only"))
    lease = granted(await store.acquire(candidates, None, 60))
    await store.release(lease.lease_id)
    await store.release(lease.lease_id)
    await store.release(LeaseId("never-issued-0000000000"))
    assert (await store.counts()).leases == 0
    granted(await store.acquire(candidates, None, 60))


async def test_no_match_counts_add_up(store: LeaseStore) -> None:
    busy, cooling = record("busy"), record("cooling")
    granted(await store.acquire(pool(busy), "example.com", 60))
    lease = granted(await store.acquire(pool(cooling), None, 60))
    await store.release(lease.lease_id)
    await report(store, lease.lease_id, ReportResult.BANNED, "example.com")
    candidates = pool(busy, cooling, record("down", healthy=False), record("new", healthy=None))
    no_match = refused(await store.acquire(candidates, "example.com", 60))
    assert no_match == NoMatch(
        considered=4, at_capacity=1, in_cooldown=1, unhealthy=2, retry_after=60.0
    )
    assert no_match.considered == no_match.at_capacity + no_match.in_cooldown + no_match.unhealthy


async def test_cooldown_is_per_target(store: LeaseStore, clock: ManualClock) -> None:
    candidates = pool(record("only", max_leases=10))
    lease = granted(await store.acquire(candidates, "a.example", 60))
    assert await report(store, lease.lease_id, ReportResult.RATE_LIMITED, None)
    assert refused(await store.acquire(candidates, "a.example", 60)).in_cooldown == 1
    granted(await store.acquire(candidates, "b.example", 60))
    granted(await store.acquire(candidates, None, 60))
    clock.advance(WINDOW)
    granted(await store.acquire(candidates, "a.example", 60))


async def test_report_target_overrides_the_lease_target(store: LeaseStore) -> None:
    candidates = pool(record("only", max_leases=10))
    lease = granted(await store.acquire(candidates, "a.example", 60))
    await report(store, lease.lease_id, ReportResult.BANNED, "b.example")
    granted(await store.acquire(candidates, "a.example", 60))
    refused(await store.acquire(candidates, "b.example", 60))


async def test_without_any_target_the_cooldown_is_global(store: LeaseStore) -> None:
    candidates = pool(record("only", max_leases=10))
    lease = granted(await store.acquire(candidates, None, 60))
    await report(store, lease.lease_id, ReportResult.RATE_LIMITED, None)
    for target in (None, "a.example", "b.example"):
        assert refused(await store.acquire(candidates, target, 60)).in_cooldown == 1
    assert (await store.counts()).cooldowns == 1


async def cooldown_after_ban(
    store: LeaseStore, clock: ManualClock, candidates: CandidatePool
) -> float:
    """Ban the proxy for t.example now; return how long it stays unavailable (1 s steps)."""
    lease = granted(await store.acquire(candidates, "t.example", 60))
    await store.release(lease.lease_id)
    await report(store, lease.lease_id, ReportResult.BANNED, None)
    waited = 0.0
    while isinstance(await store.acquire(candidates, "t.example", 1), NoMatch):
        clock.advance(1)
        waited += 1
    clock.advance(1)
    return waited


async def test_repeated_bans_back_off_exponentially_to_the_cap(
    store: LeaseStore, clock: ManualClock
) -> None:
    candidates = pool(record("only"))
    cooldowns = [await cooldown_after_ban(store, clock, candidates) for _ in range(6)]
    assert cooldowns == [60, 120, 240, 480, 600, 600]


async def test_a_ban_reported_twice_counts_once(store: LeaseStore, clock: ManualClock) -> None:
    candidates = pool(record("shared", max_leases=2))
    first = granted(await store.acquire(candidates, "t.example", 60))
    second = granted(await store.acquire(candidates, "t.example", 60))
    await report(store, first.lease_id, ReportResult.BANNED, None)
    await report(store, second.lease_id, ReportResult.BANNED, None)
    await store.release(first.lease_id)
    await store.release(second.lease_id)
    clock.advance(WINDOW)
    granted(await store.acquire(candidates, "t.example", 60))


async def test_ok_clears_the_ban_history(store: LeaseStore, clock: ManualClock) -> None:
    candidates = pool(record("only"))
    assert await cooldown_after_ban(store, clock, candidates) == 60
    assert await cooldown_after_ban(store, clock, candidates) == 120
    lease = granted(await store.acquire(candidates, "t.example", 60))
    await report(store, lease.lease_id, ReportResult.OK, None)
    await store.release(lease.lease_id)
    assert await cooldown_after_ban(store, clock, candidates) == 60


async def test_ban_history_fades_after_a_quiet_cap(store: LeaseStore, clock: ManualClock) -> None:
    candidates = pool(record("only"))
    assert await cooldown_after_ban(store, clock, candidates) == 60
    clock.advance(CAP)
    assert await cooldown_after_ban(store, clock, candidates) == 60


async def test_a_late_report_lands_within_one_window_after_the_ttl(
    store: LeaseStore, clock: ManualClock
) -> None:
    candidates = pool(record("only"))
    lease = granted(await store.acquire(candidates, "t.example", 30))
    clock.advance(30 + WINDOW - 1)
    assert await report(store, lease.lease_id, ReportResult.RATE_LIMITED, None)
    assert refused(await store.acquire(candidates, "t.example", 30)).in_cooldown == 1
    clock.advance(1)
    assert not await report(store, lease.lease_id, ReportResult.RATE_LIMITED, None)


async def test_a_report_after_release_lands_within_one_window(
    store: LeaseStore, clock: ManualClock
) -> None:
    lease = granted(await store.acquire(pool(record("only")), None, 3600))
    await store.release(lease.lease_id)
    clock.advance(WINDOW - 1)
    assert await report(store, lease.lease_id, ReportResult.OK, None)
    clock.advance(1)
    assert not await report(store, lease.lease_id, ReportResult.OK, None)


async def test_forgetting_a_proxy_ends_its_leases_and_cooldowns(store: LeaseStore) -> None:
    gone, kept = record("gone", max_leases=2), record("kept")
    lease = granted(await store.acquire(pool(gone), "t.example", 60))
    await report(store, lease.lease_id, ReportResult.BANNED, None)
    ended = granted(await store.acquire(pool(gone), None, 60))
    await store.release(ended.lease_id)
    granted(await store.acquire(pool(kept), None, 60))
    await store.forget_proxy(gone.key)
    assert await store.active_counts() == {"crawl/kept": 1}
    assert (await store.counts()).cooldowns == 0
    assert not await report(store, lease.lease_id, ReportResult.OK, None)
    assert not await report(store, ended.lease_id, ReportResult.OK, None)
    await store.release(lease.lease_id)


async def test_counts_describe_the_state(store: LeaseStore, clock: ManualClock) -> None:
    assert await store.counts() == LeaseCounts(0, 0, 0)
    candidates = pool(record("a"), record("b"))
    lease = granted(await store.acquire(candidates, None, 10))
    granted(await store.acquire(candidates, None, 100))
    await report(store, lease.lease_id, ReportResult.RATE_LIMITED, "t.example")
    assert await store.counts() == LeaseCounts(leases=2, cooldowns=1, paused_targets=0)
    assert "leases: 2 active | cooldowns: 1 | paused targets: 0" in repr(store)
    clock.advance(WINDOW)
    assert await store.counts() == LeaseCounts(leases=1, cooldowns=0, paused_targets=0)


@pytest.mark.parametrize("ttl", [0, -1, 3601])
async def test_ttls_outside_the_limits_are_refused(store: LeaseStore, ttl: int) -> None:
    with pytest.raises(InvalidTtlError):
        await store.acquire(pool(record("only")), None, ttl)
    assert (await store.counts()).leases == 0


@pytest.mark.parametrize(
    "settings",
    [
        {"cooldown_window": 0},
        {"max_ttl": 0},
        {"cooldown_window": 60, "ban_backoff_cap": 30},
    ],
)
async def test_nonsensical_settings_are_refused(settings: dict[str, float]) -> None:
    with pytest.raises(ValueError, match="must"):
        LeaseLimits(**settings)  # type: ignore[arg-type]


async def test_the_pool_ranks_offerable_proxies_and_counts_the_rest() -> None:
    candidates = pool(
        record("b", latency_millis=7),
        record("down", healthy=False),
        record("a", latency_millis=7),
        record("c", latency_millis=None),
        record("d", latency_millis=1),
    )
    assert [r.name for r in candidates.ranked] == ["d", "a", "b", "c"]
    assert (candidates.not_offerable, candidates.considered) == (1, 5)


async def test_concurrent_acquires_never_overbook(store: LeaseStore) -> None:
    candidates = pool(*(record(f"p{index}", max_leases=index % 3 + 1) for index in range(10)))
    outcomes = await asyncio.gather(*(store.acquire(candidates, None, 60) for _ in range(200)))
    granted_per_proxy = Counter(o.proxy.name for o in outcomes if isinstance(o, Lease))
    assert granted_per_proxy == {f"p{index}": index % 3 + 1 for index in range(10)}


async def test_an_idle_proxy_cooling_for_the_target_is_passed_over(store: LeaseStore) -> None:
    shared = record("shared", latency_millis=5, max_leases=3)
    banned = record("banned", latency_millis=10)
    idle = record("idle", latency_millis=50)
    candidates = pool(shared, banned, idle)
    lease = granted(await store.acquire(candidates, "site", 60))
    assert lease.proxy.name == "shared"
    first = granted(await store.acquire(candidates, "site", 60))
    assert first.proxy.name == "banned"
    assert await report(store, first.lease_id, ReportResult.BANNED, None) is not None
    await store.release(first.lease_id)
    assert granted(await store.acquire(candidates, "site", 60)).proxy.name == "idle"
    assert granted(await store.acquire(candidates, "site", 60)).proxy.name == "shared"
    assert granted(await store.acquire(candidates, "other", 60)).proxy.name == "banned"


async def test_a_ban_storm_pauses_the_target_for_the_whole_pool(make_store: MakeStore) -> None:
    store = make_store(storm_share=0.5, storm_window=60, storm_pause=120)
    candidates = pool(*(record(f"s{index}") for index in range(4)))
    pauses = []
    for _ in range(3):
        lease = granted(await store.acquire(candidates, "shop.example", 60))
        outcome = await report(store, lease.lease_id, ReportResult.BANNED)
        assert outcome is not None
        pauses.append(outcome.paused_until)
        await store.release(lease.lease_id)
    assert pauses[:2] == [None, None], "two of four banned is not more than half"
    assert pauses[2] is not None
    no_match = refused(await store.acquire(candidates, "shop.example", 60))
    assert no_match.target_paused and no_match.in_cooldown == 4
    granted(await store.acquire(candidates, "other.example", 60))
    assert (await store.counts()).paused_targets == 1


async def test_a_lease_released_early_is_revoked_on_its_proxy_until_its_end(
    store: LeaseStore, clock: ManualClock
) -> None:
    only, other = record("only", max_leases=3), record("other")
    early = granted(await store.acquire(pool(only), None, 60))
    kept = granted(await store.acquire(pool(only), None, 60))
    assert await store.release(early.lease_id) == only.key
    assert await store.release(early.lease_id) is None  # once
    assert (await store.lease_ends(only.key)).revoked == (early.lease_id,)
    assert (await store.lease_ends(other.key)).revoked == ()
    clock.advance(60)
    # Its credentials have expired by now: nothing left to revoke.
    assert await store.release(kept.lease_id) is None
    assert (await store.lease_ends(only.key)).revoked == ()


async def test_a_renewed_lease_tells_its_proxy_its_new_end_until_it_ends(
    store: LeaseStore, clock: ManualClock
) -> None:
    only = record("only", max_leases=2)
    lease = granted(await store.acquire(pool(only), None, 30))
    clock.advance(10)
    renewed = await store.renew(lease.lease_id, 60, RECORDS.get)
    assert renewed is not None
    assert (await store.lease_ends(only.key)).renewed == {lease.lease_id: renewed.expires_at}
    await store.release(lease.lease_id)
    ends = await store.lease_ends(only.key)
    assert ends.renewed == {}
    assert ends.revoked == (lease.lease_id,)
    other = granted(await store.acquire(pool(only), None, 30))
    await store.renew(other.lease_id, 30, RECORDS.get)
    clock.advance(30)
    assert (await store.lease_ends(only.key)).renewed == {}


async def test_forgetting_a_proxy_forgets_its_revocations(store: LeaseStore) -> None:
    only = record("only")
    lease = granted(await store.acquire(pool(only), None, 60))
    await store.release(lease.lease_id)
    await store.forget_proxy(only.key)
    assert await store.lease_ends(only.key) == LeaseEnds()
