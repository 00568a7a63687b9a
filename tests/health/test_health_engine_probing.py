"""The engine with the real prober and real squid processes, stepped in virtual time.

Virtual time only decides when probes are due; every probe is real I/O, so
"after exactly N probes" is exact and no test waits out an interval.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field

import pytest

from egress_proxies.catalog import ProxyKey, ProxyRecord, proxy_key
from egress_proxies.clock import ManualClock
from egress_proxies.health import HealthEngine, HealthReport, HttpProber
from egress_proxies.model import HealthCheck
from egress_proxies.stacks.inputs import ProxyCredentials
from harness.origins import ORIGIN_BODY, Origin, serve_origin
from harness.squid import SquidProcess

pytestmark = pytest.mark.integration

CREDENTIALS = ProxyCredentials("crawler", "s3cret-pass")
INTERVAL = 10


def record(
    name: str,
    squid: SquidProcess,
    url: str,
    *,
    port_index: int = 0,
    credentials: ProxyCredentials | None = CREDENTIALS,
    **check: object,
) -> ProxyRecord:
    settings = {
        "url": url,
        "expected_status": 200,
        "interval_seconds": INTERVAL,
        # Patient: a probe that times out on a loaded machine is not what these tests count
        # (the paused-squid test sets the 1 s timeout it is about).
        "timeout_seconds": 10,
        "success_threshold": 2,
        "failure_threshold": 3,
        **check,
    }
    return ProxyRecord(
        key=proxy_key("ns", name),
        uid=f"uid-{name}",
        namespace="ns",
        name=name,
        scheme="http",
        host=squid.host,
        port=squid.ports[port_index],
        health_check=HealthCheck.model_validate(settings),
        credentials=credentials,
    )


@dataclass
class Fleet:
    """The catalog and the report sink of an engine stepped in virtual time."""

    clock: ManualClock = field(default_factory=ManualClock)
    items: list[ProxyRecord] = field(default_factory=list)
    reports: list[HealthReport] = field(default_factory=list)
    arrivals: dict[ProxyKey, float] = field(default_factory=dict)  # loop time of each report
    engine: HealthEngine = field(init=False)

    def records(self) -> list[ProxyRecord]:
        return self.items

    def emit(self, report: HealthReport) -> None:
        self.reports.append(report)
        self.arrivals[report.key] = asyncio.get_running_loop().time()

    def verdicts(self) -> dict[str, bool]:
        return {report.key.split("/")[1]: report.healthy for report in self.reports}

    async def step(self, seconds: float = 1.5 * INTERVAL) -> None:
        """Advance virtual time so every proxy is due once; wait for those real probes."""
        self.clock.advance(seconds)
        self.engine.tick()
        await self.engine.settled()


@pytest.fixture
async def fleet(https_origin: Origin) -> AsyncIterator[Fleet]:
    async with HttpProber(https_origin.client_ssl) as prober:
        fleet = Fleet()
        fleet.engine = HealthEngine(
            fleet, fleet.emit, prober, fleet.clock, workers=2, rng=random.Random(1)
        )
        async with fleet.engine.running():
            yield fleet


@pytest.fixture(scope="module")
async def untrusted_origin(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Origin]:
    async with serve_origin(tmp_path_factory.mktemp("untrusted-tls")) as origin:
        yield origin  # its own CA, which the prober does not trust


@pytest.fixture
def squid() -> Iterator[SquidProcess]:
    with SquidProcess(ports=6, credentials=CREDENTIALS) as process:
        yield process


async def test_stopped_squid_turns_unhealthy_after_exactly_failure_threshold_and_recovers(
    fleet: Fleet, squid: SquidProcess, https_origin: Origin
) -> None:
    fleet.items = [record("p", squid, https_origin.url, expect_body=ORIGIN_BODY)]
    await fleet.step(0)
    assert fleet.reports == [], "one success is below the success threshold"
    await fleet.step()
    assert [(r.healthy, r.reason) for r in fleet.reports] == [(True, "ProbeSucceeded")]
    assert fleet.reports[0].latency_millis is not None

    await asyncio.to_thread(squid.stop)
    for _ in range(2):
        await fleet.step()
        assert len(fleet.reports) == 1, "still healthy below the failure threshold"
    await fleet.step()
    assert [(r.healthy, r.reason, r.latency_millis) for r in fleet.reports[1:]] == [
        (False, "ProxyUnreachable", None)
    ]

    await asyncio.to_thread(squid.start)
    await fleet.step()
    assert len(fleet.reports) == 2
    await fleet.step()
    assert [r.healthy for r in fleet.reports] == [True, False, True]
    for _ in range(3):
        await fleet.step()
    assert len(fleet.reports) == 3, "a steadily healthy proxy is not reported again"


async def test_every_kind_of_failed_check_ends_unhealthy(
    fleet: Fleet,
    squid: SquidProcess,
    http_origin: Origin,
    https_origin: Origin,
    untrusted_origin: Origin,
) -> None:
    # Each check passes or fails for its own reason, not for time: on a loaded machine
    # a TLS handshake or a 407 can take over a second (CI saw ProbeTimeout for two).
    patient = 10
    fleet.items = [
        record(
            "good-http",
            squid,
            http_origin.url,
            port_index=0,
            expect_body=ORIGIN_BODY,
            timeout_seconds=patient,
        ),
        record(
            "good-https",
            squid,
            https_origin.url,
            port_index=1,
            expect_body=ORIGIN_BODY,
            timeout_seconds=patient,
        ),
        record(
            "wrong-status",
            squid,
            https_origin.url,
            port_index=2,
            expected_status=204,
            timeout_seconds=patient,
        ),
        record(
            "missing-text",
            squid,
            http_origin.url,
            port_index=3,
            expect_body="not there",
            timeout_seconds=patient,
        ),
        record("untrusted-tls", squid, untrusted_origin.url, port_index=4, timeout_seconds=patient),
        record(
            "wrong-credentials",
            squid,
            https_origin.url,
            port_index=5,
            credentials=ProxyCredentials("crawler", "wrong"),
            timeout_seconds=patient,
        ),
    ]
    for _ in range(3):
        await fleet.step()
    assert fleet.verdicts() == {
        "good-http": True,
        "good-https": True,
        "wrong-status": False,
        "missing-text": False,
        "untrusted-tls": False,
        "wrong-credentials": False,
    }
    assert {r.key.split("/")[1]: r.reason for r in fleet.reports if not r.healthy} == {
        "wrong-status": "UnexpectedStatus",
        "missing-text": "BodyMismatch",
        "untrusted-tls": "TLSFailed",
        "wrong-credentials": "ProxyAuthRejected",
    }
    assert len(fleet.reports) == 6


async def test_a_paused_squid_holds_one_worker_for_its_timeout_and_delays_no_one_else(
    fleet: Fleet, squid: SquidProcess, http_origin: Origin
) -> None:
    with SquidProcess(credentials=CREDENTIALS) as paused:
        fleet.items = [
            record("paused", paused, http_origin.url, failure_threshold=1, timeout_seconds=1),
            *(
                record(f"p{i}", squid, http_origin.url, port_index=i, success_threshold=1)
                for i in range(4)
            ),
        ]
        paused.pause()
        started = asyncio.get_running_loop().time()
        await fleet.step(0)
        finished = asyncio.get_running_loop().time()
    assert fleet.verdicts() == {"paused": False, "p0": True, "p1": True, "p2": True, "p3": True}
    paused_key = proxy_key("ns", "paused")
    others = [at - started for key, at in fleet.arrivals.items() if key != paused_key]
    # Order, not speed: every other proxy was answered before the paused one's timeout.
    paused_at = fleet.arrivals[paused_key] - started
    assert max(others) < paused_at, "the other worker probed them"
    # The paused proxy's worker waited out its timeout, and the step waited for it.
    assert paused_at >= 1.0
    assert finished - started >= paused_at
    [timeout] = [r for r in fleet.reports if r.key == paused_key]
    assert (timeout.reason, timeout.message) == ("ProbeTimeout", "no answer within 1 s")
