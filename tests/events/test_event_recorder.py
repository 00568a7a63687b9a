"""Events aggregate into one object per (object, reason) and cost a bounded number of writes."""

from __future__ import annotations

import asyncio
import datetime
from typing import Any

import pytest

from egress_proxies.clock import ManualClock
from egress_proxies.events import SERIES_INTERVAL, EventRecorder, Regarding, event_name
from egress_proxies.kube import KubeApiError, TransportError
from egress_proxies.kube.errors import api_error

pytestmark = pytest.mark.unit

PROXY = Regarding("crawl.example.com/v1alpha1", "Proxy", "crawl", "p1", "uid-1")
EVENTS = "/api/v1/namespaces/crawl/events"


class FakeEvents:
    """Event objects by name, with every call recorded; speaks the API's 404 and 409."""

    def __init__(self) -> None:
        self.objects: dict[str, dict[str, Any]] = {}
        self.calls: list[tuple[str, str]] = []
        self.down = False

    async def get(self, path: str) -> dict[str, Any]:
        self.calls.append(("get", path))
        name = path.rsplit("/", 1)[-1]
        if name not in self.objects:
            raise api_error(404, "NotFound", name)
        return self.objects[name]

    async def create(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        self.calls.append(("create", path))
        if self.down:
            raise KubeApiError(503, "ServiceUnavailable", "down")
        name = body["metadata"]["name"]
        if name in self.objects:
            raise api_error(409, "AlreadyExists", name)
        self.objects[name] = body
        return body

    async def patch(
        self, path: str, body: dict[str, Any], *, strategic: bool = False
    ) -> dict[str, Any]:
        self.calls.append(("patch", path))
        name = path.rsplit("/", 1)[-1]
        if name not in self.objects:
            raise api_error(404, "NotFound", name)
        self.objects[name] = {**self.objects[name], **body}
        return self.objects[name]

    def writes(self) -> int:
        return sum(1 for verb, _ in self.calls if verb in ("create", "patch"))

    def by_reason(self, reason: str) -> dict[str, Any]:
        (event,) = [e for e in self.objects.values() if e["reason"] == reason]
        return event

    def count(self, reason: str) -> int:
        return int((self.by_reason(reason).get("series") or {}).get("count") or 1)


def recorder(api: FakeEvents, clock: ManualClock) -> EventRecorder:
    return EventRecorder(api, clock, component="crawl.example.com/egress-proxies", instance="op-1")


async def test_the_first_occurrence_creates_a_complete_event() -> None:
    api, clock = FakeEvents(), ManualClock()
    events = recorder(api, clock)
    events.record(PROXY, "Normal", "Provisioning", "provisioning started")
    await events.flush()

    (event,) = api.objects.values()
    assert event["involvedObject"] == {
        "apiVersion": "crawl.example.com/v1alpha1",
        "kind": "Proxy",
        "namespace": "crawl",
        "name": "p1",
        "uid": "uid-1",
    }
    assert (event["type"], event["reason"], event["message"]) == (
        "Normal",
        "Provisioning",
        "provisioning started",
    )
    assert event["eventTime"] == "2026-01-01T00:00:00.000000Z"
    assert event["reportingComponent"] == "crawl.example.com/egress-proxies"
    assert event["source"] == {"component": "egress-proxies"}
    assert event["series"] is None
    assert event["metadata"]["name"].startswith("p1.")


async def test_a_proxy_flapping_50_times_makes_two_event_objects_and_bounded_writes() -> None:
    api, clock = FakeEvents(), ManualClock()
    events = recorder(api, clock)
    events.record(PROXY, "Normal", "Healthy", "ok")
    for _ in range(50):  # a flap every 2 s for 100 s
        clock.advance(1.0)
        events.record(PROXY, "Warning", "Unhealthy", "timed out")
        await events.flush()
        clock.advance(1.0)
        events.record(PROXY, "Normal", "Healthy", "ok")
        await events.flush()
    clock.advance(SERIES_INTERVAL)
    await events.flush()

    assert len(api.objects) == 2
    assert (api.count("Healthy"), api.count("Unhealthy")) == (51, 50)
    # One write per Event object per interval: 100 s of flapping -> at most 2 x (1 + 100/10).
    assert api.writes() <= 2 * (1 + 100 / SERIES_INTERVAL + 1)
    healthy = api.by_reason("Healthy")
    assert healthy["series"]["lastObservedTime"] == "2026-01-01T00:01:40.000000Z"


async def test_occurrences_between_writes_are_counted_not_lost() -> None:
    api, clock = FakeEvents(), ManualClock()
    events = recorder(api, clock)
    for _ in range(5):
        events.record(PROXY, "Warning", "InstanceFailed", "pod died")
        await events.flush()
    assert api.count("InstanceFailed") == 1  # written once; 4 held for the interval
    clock.advance(SERIES_INTERVAL)
    await events.flush()
    assert api.count("InstanceFailed") == 5
    assert api.writes() == 2


async def test_an_occurrence_during_a_write_is_written_with_the_next_one() -> None:
    api, clock = FakeEvents(), ManualClock()
    events = recorder(api, clock)
    create = api.create

    async def create_while_it_happens_again(path: str, body: dict[str, Any]) -> dict[str, Any]:
        events.record(PROXY, "Warning", "Unhealthy", "again")
        return await create(path, body)

    api.create = create_while_it_happens_again  # type: ignore[method-assign]
    events.record(PROXY, "Warning", "Unhealthy", "first")
    await events.flush()
    assert api.count("Unhealthy") == 1
    clock.advance(SERIES_INTERVAL)
    await events.flush()
    assert api.count("Unhealthy") == 2


async def test_a_create_whose_answer_was_lost_is_not_counted_twice() -> None:
    api, clock = FakeEvents(), ManualClock()
    events = recorder(api, clock)
    create = api.create

    async def created_but_answer_lost(path: str, body: dict[str, Any]) -> dict[str, Any]:
        await create(path, body)
        raise TransportError("connection reset")

    api.create = created_but_answer_lost  # type: ignore[method-assign]
    events.record(PROXY, "Normal", "Healthy", "ok")
    await events.flush()
    api.create = create  # type: ignore[method-assign]
    events.record(PROXY, "Normal", "Healthy", "ok again")
    clock.advance(SERIES_INTERVAL)
    await events.flush()  # the retry is told 409 AlreadyExists: it updates instead

    assert len(api.objects) == 1
    assert api.count("Healthy") == 2
    assert api.by_reason("Healthy")["message"] == "ok again"


async def test_events_are_named_by_their_object_and_first_time_in_order() -> None:
    api, clock = FakeEvents(), ManualClock()
    events = recorder(api, clock)
    for reason in ("Provisioning", "Provisioned", "Healthy"):
        events.record(PROXY, "Normal", reason, "")
        clock.advance(0.001)  # all within one second
    await events.flush()
    names = {event["reason"]: name for name, event in api.objects.items()}
    assert sorted(names, key=names.__getitem__) == ["Provisioning", "Provisioned", "Healthy"]
    first = clock.utcnow() - datetime.timedelta(seconds=0.003)
    assert names["Provisioning"] == event_name(PROXY, first)
    assert names["Provisioning"].startswith("p1.")
    stamps = {e["reason"]: e["lastTimestamp"] for e in api.objects.values()}
    assert set(stamps.values()) == {"2026-01-01T00:00:00Z"}


async def test_an_event_removed_by_the_ttl_is_created_again() -> None:
    api, clock = FakeEvents(), ManualClock()
    events = recorder(api, clock)
    events.record(PROXY, "Normal", "Healthy", "ok")
    await events.flush()
    api.objects.clear()  # the API server's event TTL
    clock.advance(SERIES_INTERVAL)
    events.record(PROXY, "Normal", "Healthy", "ok")
    await events.flush()
    assert api.count("Healthy") == 2


async def test_a_failed_write_is_retried_an_interval_later() -> None:
    api, clock = FakeEvents(), ManualClock()
    events = recorder(api, clock)
    api.down = True
    events.record(PROXY, "Normal", "Provisioning", "provisioning started")
    await events.flush()
    assert api.objects == {} and events.failed == 1
    api.down = False
    await events.flush()
    assert api.objects == {}  # not before the interval
    clock.advance(SERIES_INTERVAL)
    await events.flush()
    assert len(api.objects) == 1
    assert repr(events) == (
        "<EventRecorder <SeriesBook [series: 1 | pending: 0]>"
        " [created: 1 | patched: 0 | failed: 1]>"
    )


async def settle() -> None:
    for _ in range(20):
        await asyncio.sleep(0)


async def test_run_writes_as_occurrences_arrive_and_when_series_come_due() -> None:
    api, clock = FakeEvents(), ManualClock()
    events = recorder(api, clock)
    task = asyncio.create_task(events.run())
    try:
        events.record(PROXY, "Normal", "Healthy", "ok")
        await settle()
        assert api.count("Healthy") == 1
        events.record(PROXY, "Normal", "Healthy", "ok")
        await settle()
        assert api.count("Healthy") == 1 and clock.sleepers == 1
        clock.advance(SERIES_INTERVAL)
        await settle()
        assert api.count("Healthy") == 2
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
