"""The health package's public surface is what the operator is meant to use."""

from __future__ import annotations

import re

import pytest

from egress_proxies import health

pytestmark = pytest.mark.unit


def test_public_api() -> None:
    assert set(health.__all__) == {
        "DEFAULT_WORKERS",
        "HEALTHY_REASON",
        "Failure",
        "HealthEngine",
        "HealthReport",
        "HealthSink",
        "HealthState",
        "HttpProber",
        "Instance",
        "ProbeMetrics",
        "ProbeResult",
        "Prober",
        "Reported",
    }
    assert all(getattr(health, name) is not None for name in health.__all__)


def test_failure_reasons_are_valid_condition_reasons() -> None:
    pattern = re.compile(r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$")
    reasons = [failure.value for failure in health.Failure] + [health.HEALTHY_REASON]
    assert all(pattern.match(reason) for reason in reasons)
    assert len(set(reasons)) == len(reasons)
