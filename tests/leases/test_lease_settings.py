"""The lease limits (max TTL, cooldown window, ban backoff cap) are flags and variables."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from egress_proxies import cli
from egress_proxies.clock import ManualClock
from egress_proxies.leases import (
    DEFAULT_BAN_BACKOFF_CAP,
    DEFAULT_COOLDOWN_WINDOW,
    DEFAULT_MAX_TTL,
    Lease,
    LeaseLimits,
    LeaseStore,
    NoMatch,
    ReportResult,
)
from egress_proxies.leases.candidates import CandidatePool
from egress_proxies.operator import main
from egress_proxies.settings import DiscoverySettings, LeaseLimitSettings, RunSettings, variables_of
from egress_proxies.tier import app as tier_app
from tests.discovery.discovery_helpers import record, virtual_clock

pytestmark = pytest.mark.unit


def settings_of(monkeypatch: pytest.MonkeyPatch, *flags: str) -> RunSettings:
    """The settings `egress-proxies run` would start the operator with."""
    seen: list[RunSettings] = []

    def capture(settings: RunSettings) -> int:
        seen.append(settings)
        return 0

    monkeypatch.setattr(main, "run_operator", capture)
    assert cli.main(["run", *flags]) == 0
    [settings] = seen
    return settings


def tier_limits_of(monkeypatch: pytest.MonkeyPatch, *flags: str) -> LeaseLimits:
    """The limits `egress-proxies discovery` would start the tier with."""
    seen: list[DiscoverySettings] = []

    def capture(settings: DiscoverySettings) -> int:
        seen.append(settings)
        return 0

    monkeypatch.setattr(tier_app, "run_tier", capture)
    assert cli.main(["discovery", "--lease-store", "memory", *flags]) == 0
    [settings] = seen
    return settings.lease_limits()


@pytest.fixture
def no_limit_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("MAX_TTL", "COOLDOWN", "RATE_LIMIT_COOLDOWN", "BAN_BACKOFF_CAP"):
        monkeypatch.delenv(f"EGRESS_PROXIES_LEASE_{name}_SECONDS", raising=False)
    for name in ("PACE_START", "PACE_FLOOR", "PACE_CEILING", "TARGET_BOUNDS"):
        monkeypatch.delenv(f"EGRESS_PROXIES_LEASE_{name}", raising=False)


async def cools_for(store: LeaseStore, clock: ManualClock, result: ReportResult) -> float:
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
        settings.lease_cooldown,
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
    clock = virtual_clock()
    store = settings.open_store(clock)
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
    assert (settings.lease_max_ttl, settings.lease_cooldown) == (60, 30)
    assert settings.lease_ban_backoff_cap == 90


@pytest.mark.parametrize("model", [RunSettings, DiscoverySettings])
def test_impossible_limits_are_refused_by_the_settings(
    model: type[RunSettings | DiscoverySettings],
) -> None:
    values = {"lease_store": "memory", "lease_cooldown": 600, "lease_ban_backoff_cap": 60}
    with pytest.raises(ValidationError, match="--lease-ban-backoff-cap"):
        model.model_validate(values)


@pytest.mark.usefixtures("no_limit_variables")
@pytest.mark.parametrize(
    "flags",
    [
        [],
        ["--lease-cooldown=60"],
        ["--lease-max-ttl=600", "--lease-rate-limit-cooldown=10", "--lease-ban-backoff-cap=900"],
    ],
)
def test_the_discovery_tier_takes_the_operator_s_limits(
    monkeypatch: pytest.MonkeyPatch, flags: list[str]
) -> None:
    """Tier replicas and the operator on one Redis apply the same cooldowns."""
    operator = settings_of(monkeypatch, *flags).lease_limits()
    assert tier_limits_of(monkeypatch, *flags) == operator
    if not flags:
        assert operator == LeaseLimits()


@pytest.mark.usefixtures("no_limit_variables")
def test_the_discovery_tier_reads_the_operator_s_variables(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("EGRESS_PROXIES_LEASE_COOLDOWN_SECONDS", "45")
    assert tier_limits_of(monkeypatch) == settings_of(monkeypatch).lease_limits()
    assert tier_limits_of(monkeypatch).cooldown_window == 45


@pytest.mark.usefixtures("no_limit_variables")
@pytest.mark.parametrize(
    ("flags", "named"),
    [
        (["--lease-cooldown=soon"], "--lease-cooldown / $EGRESS_PROXIES_LEASE_COOLDOWN_SECONDS"),
        (["--lease-cooldown=600", "--lease-ban-backoff-cap=60"], "cap must be at least"),
    ],
)
def test_impossible_tier_limits_exit_2_naming_the_flag(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    flags: list[str],
    named: str,
) -> None:
    with pytest.raises(SystemExit) as exited:
        tier_limits_of(monkeypatch, *flags)
    assert exited.value.code == 2
    assert named in capsys.readouterr().err


BOUNDS = (
    '[{"pattern": "*.shop.example", "maxRequestsPerSecond": 5, '
    '"maxFleetRequestsPerSecond": 20, "maxLeases": 8}, {"pattern": "*", "maxLeases": 50}]'
)


@pytest.mark.usefixtures("no_limit_variables")
def test_pace_options_reach_both_commands(monkeypatch: pytest.MonkeyPatch) -> None:
    flags = ["--lease-pace-start=2", "--lease-pace-ceiling=30", f"--lease-target-bounds={BOUNDS}"]
    operator = settings_of(monkeypatch, *flags).lease_limits()
    assert tier_limits_of(monkeypatch, *flags) == operator
    assert (operator.pace.start, operator.pace.ceiling, operator.pace.floor) == (2.0, 30.0, 0.1)
    shop = operator.pace.bounds_for("www.shop.example")
    assert (shop.max_rate_per_proxy, shop.max_rate, shop.max_leases) == (5.0, 20.0, 8)
    assert operator.pace.bounds_for("other.example").max_leases == 50


@pytest.mark.usefixtures("no_limit_variables")
def test_target_bounds_come_from_their_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EGRESS_PROXIES_LEASE_TARGET_BOUNDS", BOUNDS)
    assert tier_limits_of(monkeypatch).pace.bounds_for("a.shop.example").max_leases == 8


@pytest.mark.usefixtures("no_limit_variables")
@pytest.mark.parametrize(
    ("bounds", "named"),
    [
        ("[{", "target bounds"),
        ('[{"pattern": "x", "maxLeases": "8"}]', "0.maxLeases"),
        ('[{"pattern": "x", "maxRate": 1}]', "0.maxRate"),
        ('[{"pattern": "x", "maxLeases": 0}]', "max_leases of 'x' must be positive"),
    ],
)
@pytest.mark.parametrize("command", ["run", "discovery"])
def test_bad_target_bounds_exit_2_naming_the_problem(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    bounds: str,
    named: str,
    command: str,
) -> None:
    read = settings_of if command == "run" else tier_limits_of
    with pytest.raises(SystemExit) as exited:
        read(monkeypatch, f"--lease-target-bounds={bounds}")
    assert exited.value.code == 2
    error = capsys.readouterr().err
    assert named in error and "Traceback" not in error


@pytest.mark.usefixtures("no_limit_variables")
def test_both_commands_build_one_set_of_limits_from_every_limit_variable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    values = {
        "lease_max_ttl": "120",
        "lease_cooldown": "50",
        "lease_rate_limit_cooldown": "7",
        "lease_ban_backoff_cap": "500",
        "lease_pace_start": "3",
        "lease_pace_floor": "0.5",
        "lease_pace_ceiling": "9",
        "lease_target_bounds": BOUNDS,
    }
    assert set(values) == set(LeaseLimitSettings.model_fields)
    for name, value in values.items():
        (variable,) = variables_of(LeaseLimitSettings, name)
        monkeypatch.setenv(variable, value)

    operator = settings_of(monkeypatch).lease_limits()

    assert tier_limits_of(monkeypatch) == operator
    assert (operator.max_ttl, operator.cooldown_window, operator.ban_backoff_cap) == (120, 50, 500)
    assert (operator.rate_limit_window, operator.pace.start, operator.pace.ceiling) == (7, 3, 9)
    assert operator.pace.bounds_for("www.shop.example").max_leases == 8
