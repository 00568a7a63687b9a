"""The status writer remembers what it wrote per Proxy, and for which Proxy (UID)."""

from __future__ import annotations

import gc
import tracemalloc
from collections.abc import Mapping
from typing import Any

import pytest

from egress_proxies.events import Regarding
from egress_proxies.kube import TransportError
from egress_proxies.model import (
    HEALTHY,
    PROVISIONED,
    READY,
    RECONCILING,
    STALLED,
    ConditionStatus,
    ProxyStatus,
    find_condition,
)
from egress_proxies.proxies.reconcile import set_condition
from egress_proxies.proxies.status import StatusWriter
from egress_proxies.vocabulary import DRAINING_ANNOTATION

pytestmark = pytest.mark.unit


class PatchRecorder:
    """Records status patches; answers nothing else."""

    def __init__(self) -> None:
        self.patches: list[tuple[str, Mapping[str, Any]]] = []

    async def patch(self, path: str, body: Mapping[str, Any]) -> Mapping[str, Any]:
        self.patches.append((path, body))
        return {}


class EventList:
    """Records what the writer posts."""

    def __init__(self) -> None:
        self.posted: list[tuple[str, str, str]] = []

    def record(self, regarding: Regarding, type_: str, reason: str, message: str) -> None:
        self.posted.append((regarding.name, type_, reason))


def proxy(uid: str, status: Mapping[str, Any] | None = None) -> dict[str, Any]:
    return {"metadata": {"namespace": "crawl", "name": "p1", "uid": uid}, "status": status or {}}


def set_stack(stack: str) -> Any:
    return lambda status: status.model_copy(update={"stack": stack})


async def test_latest_is_what_was_written_for_that_proxy() -> None:
    api = PatchRecorder()
    writer = StatusWriter(api, EventList())  # type: ignore[arg-type]
    assert writer.latest("crawl", "p1", "uid-1") is None

    await writer.update(proxy("uid-1"), set_stack("crawl.p1"))

    latest = writer.latest("crawl", "p1", "uid-1")
    assert isinstance(latest, ProxyStatus)
    assert latest.stack == "crawl.p1"
    assert len(api.patches) == 1


async def test_a_proxy_created_again_under_its_name_starts_from_its_own_body() -> None:
    api = PatchRecorder()
    writer = StatusWriter(api, EventList())  # type: ignore[arg-type]
    await writer.update(proxy("uid-1"), set_stack("crawl.p1"))

    assert writer.latest("crawl", "p1", "uid-2") is None
    written = await writer.update(proxy("uid-2", {"port": 3128}), lambda status: status)

    assert written.stack is None  # not the deleted Proxy's
    assert written.port == 3128


async def test_what_it_remembers_per_proxy_is_small() -> None:
    # A parsed ProxyStatus with two conditions costs about 4.4 KiB; its JSON about 0.7 KiB.
    api = PatchRecorder()
    writer = StatusWriter(api, EventList())  # type: ignore[arg-type]
    condition = {
        "status": "True",
        "reason": "Ok",
        "message": "the stack is up and the pod answers",
        "lastTransitionTime": "2026-12-02T05:02:03Z",
    }
    bodies = [
        {
            "metadata": {"namespace": "crawl", "name": f"p{index:05d}", "uid": f"uid-{index}"},
            "status": {
                "ip": f"10.0.{index // 256}.{index % 256}",
                "port": 3128,
                "credentialsSecret": f"proxy-p{index:05d}-credentials",
                "conditions": [{"type": kind, **condition} for kind in ("Provisioned", "Healthy")],
            },
        }
        for index in range(500)
    ]
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for index, body in enumerate(bodies):
            await writer.update(body, set_stack(f"crawl.p{index:05d}"))
            api.patches.clear()  # the recorder's copies are not the writer's
        gc.collect()
        per_proxy = (tracemalloc.get_traced_memory()[0] - before) / len(bodies)
    finally:
        tracemalloc.stop()
    assert per_proxy < 1.5 * 1024, per_proxy
    latest = writer.latest("crawl", "p00042", "uid-42")
    assert latest is not None and latest.stack == "crawl.p00042"
    assert latest.phase is not None and latest.conditions[1].type == "Healthy"


def healthy(status: ProxyStatus, state: ConditionStatus) -> ProxyStatus:
    conditions = set_condition(
        status.conditions, HEALTHY, state, reason="Probe", message="", now="2026-12-04T12:00:00Z"
    )
    return status.model_copy(update={"conditions": conditions})


def provisioned(status: ProxyStatus) -> ProxyStatus:
    conditions = set_condition(
        status.conditions,
        PROVISIONED,
        ConditionStatus.TRUE,
        reason="Created",
        message="",
        now="2026-12-04T12:00:00Z",
    )
    return status.model_copy(update={"conditions": conditions, "observed_generation": 1})


async def test_it_writes_ready_and_posts_each_transition_once() -> None:
    api, events = PatchRecorder(), EventList()
    writer = StatusWriter(api, events)  # type: ignore[arg-type]
    body = proxy("uid-1")

    written = await writer.update(body, provisioned)
    written = await writer.update(body, lambda status: healthy(status, ConditionStatus.TRUE))

    ready = find_condition(written.conditions, READY)
    assert ready is not None and ready.status == ConditionStatus.TRUE
    assert [reason for _, _, reason in events.posted] == ["Provisioned", "Healthy"]
    assert len(api.patches) == 2
    conditions = api.patches[-1][1]["status"]["conditions"]
    assert [c["type"] for c in conditions] == [PROVISIONED, READY, RECONCILING, STALLED, HEALTHY]


async def test_a_healthy_proxy_at_rest_costs_no_write_and_no_event() -> None:
    api, events = PatchRecorder(), EventList()
    writer = StatusWriter(api, events)  # type: ignore[arg-type]
    body = proxy("uid-1")
    await writer.update(body, lambda status: healthy(provisioned(status), ConditionStatus.TRUE))
    patches, posted = len(api.patches), len(events.posted)

    for _ in range(3):
        await writer.update(body, provisioned)  # the reconciler finds nothing to do
        await writer.update(body, lambda status: healthy(status, ConditionStatus.TRUE))

    assert (len(api.patches), len(events.posted)) == (patches, posted)


async def test_draining_makes_it_not_ready_without_another_writer() -> None:
    api = PatchRecorder()
    writer = StatusWriter(api, EventList())  # type: ignore[arg-type]
    body = proxy("uid-1")
    await writer.update(body, lambda status: healthy(provisioned(status), ConditionStatus.TRUE))

    body["metadata"]["annotations"] = {DRAINING_ANNOTATION: "2026-12-04T12:01:00Z"}
    written = await writer.update(body, lambda status: status)

    ready = find_condition(written.conditions, READY)
    assert ready is not None and (ready.status, ready.reason) == (ConditionStatus.FALSE, "Draining")
    assert len(api.patches) == 2


class StatusApi(PatchRecorder):
    """Answers GETs with the Proxy's status as the API server holds it, or fails them."""

    def __init__(self, status: Mapping[str, Any] | None, uid: str = "uid-1") -> None:
        super().__init__()
        self.status = status
        self.uid = uid

    async def get(self, path: str) -> Mapping[str, Any]:
        if self.status is None:
            raise TransportError("connection refused")
        return proxy(self.uid, self.status)


def set_secret(name: str) -> Any:
    return lambda status: status.model_copy(update={"credentials_secret": name})


async def test_a_replica_starting_work_keeps_its_own_newer_write_over_a_stale_body() -> None:
    # The restart race: this replica wrote credentialsSecret; kopf still hands
    # it a body from before that write when the health engine writes next.
    api = StatusApi({"credentialsSecret": "proxy-p1-credentials", "stack": "crawl.p1"})
    writer = StatusWriter(api, EventList())  # type: ignore[arg-type]
    await writer.update(proxy("uid-1"), set_secret("proxy-p1-credentials"))

    await writer.reread_written()
    written = await writer.update(
        proxy("uid-1"), lambda status: healthy(status, ConditionStatus.FALSE)
    )

    assert written.credentials_secret == "proxy-p1-credentials"
    assert api.patches[-1][1]["status"]["credentialsSecret"] == "proxy-p1-credentials"


async def test_a_replica_starting_work_builds_on_what_another_replica_wrote_meanwhile() -> None:
    api = StatusApi(None)
    writer = StatusWriter(api, EventList())  # type: ignore[arg-type]
    await writer.update(proxy("uid-1"), set_stack("crawl.p1"))
    api.status = {"stack": "crawl.p1", "ip": "10.0.0.9", "port": 3128}  # the other replica's

    await writer.reread_written()

    latest = writer.latest("crawl", "p1", "uid-1")
    assert latest is not None and latest.ip == "10.0.0.9"


async def test_a_failed_reread_keeps_what_this_replica_wrote() -> None:
    api = StatusApi(None)
    writer = StatusWriter(api, EventList())  # type: ignore[arg-type]
    await writer.update(proxy("uid-1"), set_secret("proxy-p1-credentials"))

    await writer.reread_written()
    written = await writer.update(proxy("uid-1"), set_stack("crawl.p1"))

    assert written.credentials_secret == "proxy-p1-credentials"
