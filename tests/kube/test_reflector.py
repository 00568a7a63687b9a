"""The list+watch reflector: its pure decisions, and its shell over a scripted client."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from typing import Any

import pytest

from egress_proxies.clock import ManualClock
from egress_proxies.kube import JsonObject, KubeApiError
from egress_proxies.kube.reflector import (
    INITIAL_BACKOFF,
    MAX_BACKOFF,
    Action,
    Reflector,
    Step,
    next_step,
)

pytestmark = pytest.mark.unit


def test_a_clean_end_of_a_watch_resumes_it_at_once_and_resets_the_backoff() -> None:
    assert next_step(None, "42", 8.0) == Step(Action.WATCH, 0.0, INITIAL_BACKOFF)


def test_410_gone_relists_at_once() -> None:
    gone = KubeApiError(410, "Expired", "too old resource version")
    assert next_step(gone, "42", 4.0) == Step(Action.LIST, 0.0, 4.0)


def test_other_errors_relist_after_a_doubling_bounded_backoff() -> None:
    error = KubeApiError(500, "InternalError", "boom")
    delays = []
    backoff = INITIAL_BACKOFF
    for _ in range(10):
        step = next_step(error, None, backoff)
        assert step.action is Action.LIST
        delays.append(step.delay)
        backoff = step.backoff
    assert delays[:4] == [0.5, 1.0, 2.0, 4.0]
    assert max(delays) == MAX_BACKOFF
    assert next_step(ConnectionResetError(), "7", 1.0) == Step(Action.LIST, 1.0, 2.0)


def obj(name: str, version: str) -> JsonObject:
    return {"metadata": {"namespace": "ns", "name": name, "resourceVersion": version}}


class Recorder:
    """A sink that keeps the mirrored names."""

    def __init__(self) -> None:
        self.names: dict[str, str] = {}
        self.replaced = 0

    def replace(self, objects: Sequence[Mapping[str, Any]]) -> None:
        self.replaced += 1
        self.names = {o["metadata"]["name"]: o["metadata"]["resourceVersion"] for o in objects}

    def put(self, obj: Mapping[str, Any]) -> None:
        self.names[obj["metadata"]["name"]] = obj["metadata"]["resourceVersion"]

    def remove(self, obj: Mapping[str, Any]) -> None:
        self.names.pop(obj["metadata"]["name"], None)


class ScriptedServer:
    """Answers lists and watches from scripts, recording each call's resourceVersion."""

    def __init__(
        self,
        lists: Sequence[JsonObject | Exception],
        watches: Sequence[list[JsonObject] | Exception],
    ) -> None:
        self.lists = list(lists)
        self.watches = list(watches)
        self.calls: list[tuple[str, str | None]] = []
        self.done = asyncio.Event()

    async def request(
        self,
        method: str,
        path: str,
        *,
        body: JsonObject | None = None,
        params: Mapping[str, str] | None = None,
        content_type: str = "application/json",
    ) -> JsonObject:
        self.calls.append(("list", (params or {}).get("labelSelector")))
        answer = self.lists.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    async def watch(
        self, path: str, *, resource_version: str, timeout_seconds: int = 300
    ) -> AsyncIterator[JsonObject]:
        self.calls.append(("watch", resource_version))
        if not self.watches:
            self.done.set()
            await asyncio.Event().wait()
        answer = self.watches.pop(0)
        if isinstance(answer, Exception):
            raise answer
        for event in answer:
            yield event


def listing(version: str, *items: JsonObject) -> JsonObject:
    return {"metadata": {"resourceVersion": version}, "items": list(items)}


async def run_until_idle(
    reflector: Reflector,
    server: ScriptedServer,
    clock: ManualClock,
    while_asleep: Callable[[], None] = lambda: None,
) -> list[float]:
    """Run the reflector until its scripts are spent, ending each of its sleeps; the sleeps."""
    slept: list[float] = []
    task = asyncio.create_task(reflector.run())
    for _ in range(10_000):
        if server.done.is_set():
            break
        wake = clock.next_wake
        if wake is not None:
            while_asleep()
            slept.append(wake - clock.monotonic())
            clock.advance(wake - clock.monotonic())
        await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert server.done.is_set(), "the reflector never reached the end of its scripts"
    return slept


async def test_lists_then_watches_from_the_lists_version_and_then_the_last_event() -> None:
    server = ScriptedServer(
        [listing("10", obj("a", "9"))],
        [
            [
                {"type": "ADDED", "object": obj("b", "11")},
                {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "15"}}},
            ],
            [{"type": "DELETED", "object": obj("a", "16")}],
        ],
    )
    sink = Recorder()
    clock = ManualClock()
    reflector = Reflector(server, "/x", sink, clock=clock)
    await run_until_idle(reflector, server, clock)
    assert server.calls == [("list", None), ("watch", "10"), ("watch", "15"), ("watch", "16")]
    assert sink.names == {"b": "11"}
    assert reflector.synced.is_set()
    assert reflector.resource_version == "16"
    assert "synced" in repr(reflector) and "resourceVersion: 16" in repr(reflector)


async def test_a_410_error_event_relists_at_once_and_drops_what_vanished() -> None:
    gone = {"type": "ERROR", "object": {"code": 410, "reason": "Expired", "message": "old"}}
    server = ScriptedServer(
        [listing("10", obj("a", "9"), obj("b", "9")), listing("30", obj("b", "29"))],
        [[gone]],
    )
    sink = Recorder()
    clock = ManualClock()
    reflector = Reflector(server, "/x", sink, clock=clock)
    sleeps = await run_until_idle(reflector, server, clock)
    assert server.calls == [("list", None), ("watch", "10"), ("list", None), ("watch", "30")]
    assert sink.names == {"b": "29"}
    assert sink.replaced == 2
    assert sleeps == []
    assert reflector.errors == 1


async def test_errors_back_off_doubling_and_unsynced_until_a_list_succeeds() -> None:
    server = ScriptedServer(
        [
            KubeApiError(503, "ServiceUnavailable", "down"),
            ConnectionRefusedError("refused"),
            KubeApiError(403, "Forbidden", "no"),
            listing("5"),
        ],
        [],
    )
    clock = ManualClock()
    reflector = Reflector(server, "/x", Recorder(), label_selector="a/b", clock=clock)
    assert await run_until_idle(reflector, server, clock) == [0.5, 1.0, 2.0]
    assert server.calls[:4] == [("list", "a/b")] * 4
    assert reflector.synced.is_set()
    assert reflector.errors == 3


async def test_not_synced_while_the_first_list_fails() -> None:
    server = ScriptedServer([KubeApiError(500, "", "x")] * 3 + [listing("1")], [])
    synced_while_failing: list[bool] = []
    clock = ManualClock()
    reflector = Reflector(server, "/x", Recorder(), clock=clock)
    await run_until_idle(
        reflector, server, clock, lambda: synced_while_failing.append(reflector.synced.is_set())
    )
    assert synced_while_failing == [False, False, False]
    assert reflector.synced.is_set()
