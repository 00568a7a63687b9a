"""The lease limits (max TTL, cooldown window, ban backoff cap) are flags and variables."""

from __future__ import annotations

from pathlib import Path

import pytest

from egress_proxies import cli
from egress_proxies.leases import (
    DEFAULT_BAN_BACKOFF_CAP,
    DEFAULT_COOLDOWN_WINDOW,
    DEFAULT_MAX_TTL,
    Lease,
    LeaseStore,
    NoMatch,
    ReportResult,
)
from egress_proxies.leases.candidates import CandidatePool
from egress_proxies.operator import app
from egress_proxies.operator.app import ConfigurationError, OperatorSettings, lease_store
from tests.integration.discovery_helpers import VirtualClock, record


def settings_of(monkeypatch: pytest.MonkeyPatch, *flags: str) -> OperatorSettings:
    """The settings `egress-proxies run` would start the operator with."""
    seen: list[OperatorSettings] = []

    def capture(settings: OperatorSettings) -> int:
        seen.append(settings)
        return 0

    monkeypatch.setattr(app, "run_operator", capture)
    assert cli.main(["run", *flags]) == 0
    [settings] = seen
    return settings


async def cools_for(store: LeaseStore, clock: VirtualClock, result: ReportResult) -> float:
    """How long a report of `result` keeps the one proxy from the target (whole seconds)."""
    pool = CandidatePool.of([record("p1")])
    lease = await store.acquire(pool, "example.com", 1)
    assert isinstance(lease, Lease), lease
    await store.report(lease.lease_id, result, None, None, lambda _: None)
    await store.release(lease.lease_id)
    waited = 0.0
    while isinstance(await store.acquire(pool, "example.com", 1), NoMatch):
        clock.advance(1)
        waited += 1
    clock.advance(1)  # let the probing lease run out
    return waited


def test_without_flags_the_defaults_hold(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("MAX_TTL", "COOLDOWN", "BAN_BACKOFF_CAP"):
        monkeypatch.delenv(f"EGRESS_PROXIES_LEASE_{name}_SECONDS", raising=False)
    settings = settings_of(monkeypatch)
    limits = (
        settings.lease_max_ttl,
        settings.lease_cooldown_window,
        settings.lease_ban_backoff_cap,
    )
    assert limits == (DEFAULT_MAX_TTL, DEFAULT_COOLDOWN_WINDOW, DEFAULT_BAN_BACKOFF_CAP)
    assert limits == (3600, 300, 21600)


async def test_flags_set_the_store_s_limits(monkeypatch: pytest.MonkeyPatch) -> None:
    settings = settings_of(
        monkeypatch,
        "--lease-max-ttl=600",
        "--lease-cooldown=100",
        "--lease-ban-backoff-cap=150",
        "--lease-rate-limit-cooldown=40",
    )
    clock = VirtualClock()
    store = lease_store(settings, clock)
    assert store.max_ttl == 600
    assert await cools_for(store, clock, ReportResult.RATE_LIMITED) == 40
    assert await cools_for(store, clock, ReportResult.RATE_LIMITED) == 80, "a repeat doubles"
    assert await cools_for(store, clock, ReportResult.RATE_LIMITED) == 100, (
        "160 s, capped by the window"
    )
    assert await cools_for(store, clock, ReportResult.BANNED) == 100
    assert await cools_for(store, clock, ReportResult.BANNED) == 150, "200 s, capped"


def test_variables_set_them_too(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EGRESS_PROXIES_LEASE_MAX_TTL_SECONDS", "60")
    monkeypatch.setenv("EGRESS_PROXIES_LEASE_COOLDOWN_SECONDS", "30")
    monkeypatch.setenv("EGRESS_PROXIES_LEASE_BAN_BACKOFF_CAP_SECONDS", "90")
    settings = settings_of(monkeypatch)
    assert (settings.lease_max_ttl, settings.lease_cooldown_window) == (60, 30)
    assert settings.lease_ban_backoff_cap == 90


def test_impossible_limits_refuse_to_start(tmp_path: Path) -> None:
    settings = OperatorSettings(
        state_dir=tmp_path, lease_cooldown_window=600, lease_ban_backoff_cap=60
    )
    with pytest.raises(ConfigurationError, match="--lease-ban-backoff-cap"):
        lease_store(settings)
