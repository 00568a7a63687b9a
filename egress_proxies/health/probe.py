"""The probe seam: what a prober returns, and the Protocol the engine calls."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Protocol

from egress_proxies.catalog import ProxyRecord


class Failure(StrEnum):
    """Why a probe failed. The value is the Healthy condition's reason."""

    PROXY_UNREACHABLE = "ProxyUnreachable"
    PROXY_AUTH_REJECTED = "ProxyAuthRejected"
    TUNNEL_REFUSED = "TunnelRefused"
    TLS_FAILED = "TLSFailed"
    TIMEOUT = "ProbeTimeout"
    UNEXPECTED_STATUS = "UnexpectedStatus"
    BODY_MISMATCH = "BodyMismatch"
    CONNECTION_FAILED = "ConnectionFailed"
    PROBE_ERROR = "ProbeError"


@dataclass(frozen=True)
class ProbeResult:
    """One probe through a proxy: how long it took and, if it failed, why."""

    latency_seconds: float
    failure: Failure | None = None
    detail: str = ""

    @property
    def ok(self) -> bool:
        """True when the probe met every expectation of the health check."""
        return self.failure is None


class Prober(Protocol):
    """Probes one proxy once. Never raises for a failed probe: it returns the failure."""

    async def probe(self, record: ProxyRecord) -> ProbeResult:
        """Probe `record.health_check.url` through the proxy, within its timeout."""
        ...
