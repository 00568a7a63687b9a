"""The handler shell carries out the state machine's Decision, over fakes of its Protocols.

The runner, the API client and the status sink are small in-memory fakes of
`proxies/ports.py`; the requeue timer runs on a `ManualClock`, so a retry's
backoff passes without sleeping. The e2e tests run the same shell over the
real client, runner and writer.
"""

from __future__ import annotations

import asyncio
import copy
import datetime
import logging
import sys
import types
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any, Literal, cast

import kopf
import pytest
from kopf._cogs.structs.references import Resource
from kopf._core.actions.invocation import invoke
from kopf._core.intents.causes import ChangingCause, WatchingCause
from prometheus_client import CollectorRegistry

from egress_proxies.catalog import ProxyKey, proxy_key
from egress_proxies.catalog.fleet import Fleet
from egress_proxies.clock import ManualClock
from egress_proxies.kube import NotFoundError
from egress_proxies.kube.selectors import parse_selector
from egress_proxies.model import (
    GROUP,
    KIND,
    PERMANENT_ERROR,
    PLURAL,
    PROVISIONED,
    VERSION,
    ConditionStatus,
    ProviderName,
    ProxySpec,
    ProxyStatus,
    find_condition,
)
from egress_proxies.providers.instance import InstanceHealth, InstanceObservation
from egress_proxies.providers.pods import pod_instance_id
from egress_proxies.proxies import handlers
from egress_proxies.proxies import reconcile as machine
from egress_proxies.proxies import shell as shell_module
from egress_proxies.proxies.backoff import RetryPolicy
from egress_proxies.proxies.components import Components
from egress_proxies.proxies.credentials import credentials_secret_name
from egress_proxies.proxies.effects import remove_instance
from egress_proxies.proxies.handlers import register
from egress_proxies.proxies.instances import InstanceCache
from egress_proxies.proxies.ports import JsonObject
from egress_proxies.proxies.requeue import Requeue
from egress_proxies.proxies.sharding import Shard
from egress_proxies.proxies.shell import delete_proxy, reconcile_proxy
from egress_proxies.stacks import outputs as stack_outputs
from egress_proxies.stacks.backends import StackState
from egress_proxies.stacks.errors import classify
from egress_proxies.stacks.inputs import ProgramInputs
from egress_proxies.stacks.runner import StackOperationError
from egress_proxies.telemetry.metrics import StackMetrics
from egress_proxies.telemetry.tracing import Spans
from egress_proxies.vocabulary import (
    FINALIZER,
    OWNER_ANNOTATION,
    RECONCILE_HANDLED_ANNOTATION,
    RECONCILE_REQUEST_ANNOTATION,
    SPEC_HASH_ANNOTATION,
)

pytestmark = pytest.mark.unit

GCE: JsonObject = {
    "provider": "gcp",
    "gcp": {"project": "demo", "zone": "us-central1-a", "machineType": "e2-micro"},
}
# What the GCE program exports (the binding adds the spec hash; the fake runner runs no program).
OUTPUTS = {
    stack_outputs.IP: "127.9.0.2",
    stack_outputs.PORT: 3128,
    stack_outputs.INSTANCE_ID: "gce/proxy-abc",
    stack_outputs.SPEC_HASH: machine.spec_hash(ProxySpec.model_validate(GCE), None),
}


class FakeApi:
    """Objects by REST path, in memory; records every write."""

    def __init__(self) -> None:
        self.objects: dict[str, JsonObject] = {}
        self.writes: list[tuple[str, str]] = []

    async def get(self, path: str) -> JsonObject:
        if path not in self.objects:
            raise NotFoundError(404, "NotFound", path)
        return copy.deepcopy(self.objects[path])

    async def create(self, path: str, body: JsonObject) -> JsonObject:
        self.writes.append(("create", path))
        self.objects[f"{path}/{body['metadata']['name']}"] = copy.deepcopy(body)
        return body

    async def patch(self, path: str, body: JsonObject, *, strategic: bool = False) -> JsonObject:
        self.writes.append(("patch", path))
        return body

    async def delete(self, path: str, *, grace_seconds: int | None = None) -> JsonObject | None:
        self.writes.append(("delete", path))
        return self.objects.pop(path, None)

    async def request(
        self, method: str, path: str, *, body: JsonObject | None = None
    ) -> JsonObject:
        self.writes.append((method.lower(), path))
        return {}


class FakeStacks:
    """Stacks as checkpoints in a dict; `up` and `destroy` succeed unless told to fail."""

    def __init__(self) -> None:
        self.states: dict[str, StackState] = {}
        self.calls: list[tuple[str, str, bool]] = []
        self.failure: str | None = None

    async def state(self, stack: str) -> StackState | None:
        return self.states.get(stack)

    async def up(
        self, stack: str, uid: str, program: Callable[[], None], *, refresh: bool = False
    ) -> Mapping[str, Any]:
        self.calls.append(("up", stack, refresh))
        if self.failure is not None:
            raise StackOperationError("up", stack, self.failure)
        self.states[stack] = StackState(stack, dict(OUTPUTS), 0, 3)
        return OUTPUTS

    async def destroy(self, stack: str) -> None:
        self.calls.append(("destroy", stack, False))
        if self.failure is not None:
            raise StackOperationError("destroy", stack, self.failure)
        self.states.pop(stack, None)

    async def forget(self, stack: str) -> None:
        self.calls.append(("forget", stack, False))
        self.states.pop(stack, None)


class FakeStatus:
    """The last status written per Proxy."""

    def __init__(self) -> None:
        self.statuses: dict[str, ProxyStatus] = {}

    async def update(
        self,
        body: Mapping[str, Any],
        mutate: Callable[[ProxyStatus], ProxyStatus],
        *,
        deleting: bool = False,
    ) -> ProxyStatus:
        name = body["metadata"]["name"]
        self.statuses[name] = mutate(self.statuses.get(name, ProxyStatus()))
        return self.statuses[name]

    def latest(self, namespace: str, name: str, uid: str) -> ProxyStatus | None:
        return self.statuses.get(name)

    def forget(self, namespace: str, name: str) -> None:
        self.statuses.pop(name, None)

    def provisioned(self, name: str) -> tuple[str, str]:
        condition = find_condition(self.statuses[name].conditions, PROVISIONED)
        assert condition is not None
        return condition.status.value, condition.reason


class Shell:
    """The handler shell over the fakes, with what it posted and requeued."""

    def __init__(self, programs: Mapping[ProviderName, Callable[[ProgramInputs], None]]) -> None:
        self.api, self.stacks, self.status = FakeApi(), FakeStacks(), FakeStatus()
        self.clock = ManualClock(wall=datetime.datetime(2026, 11, 29, 12, 0, tzinfo=datetime.UTC))
        self.touched: list[tuple[str, str]] = []
        self.events: list[machine.Event] = []
        self.gone: list[ProxyKey] = []

        async def touch(namespace: str, name: str, stamp: str) -> None:
            self.touched.append((namespace, name))

        self.requeue = Requeue(touch, self.clock)
        self.components = Components(
            client=self.api,
            runner=self.stacks,
            writer=self.status,
            fleet=Fleet(),
            programs=programs,
            classify=classify,
            on_proxy_gone=self._gone,
            spans=Spans(),
            stack_metrics=StackMetrics(CollectorRegistry()),
            instances=InstanceCache(),
            requeue=self.requeue,
            policy=RetryPolicy(),
            clock=self.clock,
            post_event=lambda body, event: self.events.append(event),
        )

    async def _gone(self, key: ProxyKey) -> None:
        self.gone.append(key)

    async def reconcile(self, body: JsonObject) -> kopf.Patch:
        patch = kopf.Patch()
        await reconcile_proxy(self.components, body, patch)
        return patch


def no_program(inputs: ProgramInputs) -> None:
    """Never run: the fake runner does not call programs."""


def proxy(spec: JsonObject, **annotations: str) -> JsonObject:
    return {
        "metadata": {
            "namespace": "crawl",
            "name": "p1",
            "uid": "uid-1",
            "generation": 1,
            "annotations": annotations,
        },
        "spec": spec,
    }


@pytest.fixture
async def shell() -> AsyncIterator[Shell]:
    shell = Shell({ProviderName.GCP: no_program})
    yield shell
    await shell.requeue.close()


async def test_a_new_proxy_runs_up_and_records_what_the_machine_decided(shell: Shell) -> None:
    patch = await shell.reconcile(proxy(GCE))

    assert shell.stacks.calls == [("up", "crawl.p1", False)]
    wanted = machine.spec_hash(ProxySpec.model_validate(GCE), None)
    assert patch.metadata.annotations[SPEC_HASH_ANNOTATION] == wanted
    assert shell.status.provisioned("p1") == (ConditionStatus.TRUE.value, machine.CREATED)
    assert shell.status.statuses["p1"].ip == "127.9.0.2"
    assert shell.status.statuses["p1"].credentials_secret is not None
    assert ("create", "/api/v1/namespaces/crawl/secrets") in shell.api.writes
    assert repr(shell.requeue) == "<Requeue [0 pending]>"


async def test_a_matching_stack_is_adopted_without_up(shell: Shell) -> None:
    await shell.reconcile(proxy(GCE))
    shell.stacks.calls.clear()

    patch = await shell.reconcile(proxy(GCE))

    assert shell.stacks.calls == []
    assert SPEC_HASH_ANNOTATION in patch.metadata.annotations


async def test_a_failed_up_retries_after_the_backoff_in_virtual_time(shell: Shell) -> None:
    shell.stacks.failure = "error: connection reset by peer"

    await shell.reconcile(proxy(GCE))

    assert shell.status.provisioned("p1") == ("False", machine.TRANSIENT_ERROR)
    backoff = shell.status.statuses["p1"].backoff
    assert backoff is not None and backoff.failures == 1
    delay = RetryPolicy().delay(1, "uid-1")
    await asyncio.sleep(0)  # the requeue timer starts waiting on the clock
    assert shell.clock.sleepers == 1
    shell.clock.advance(delay - 0.5)
    await asyncio.sleep(0)
    assert shell.touched == []
    shell.clock.advance(1)
    for _ in range(3):  # the timer task wakes, then awaits the touch
        await asyncio.sleep(0)
    assert shell.touched == [("crawl", "p1")]


async def test_a_provider_without_a_program_fails_permanently_without_up() -> None:
    shell = Shell({ProviderName.KUBERNETES: no_program})

    with pytest.raises(kopf.PermanentError, match="provider gcp is not enabled"):
        await shell.reconcile(proxy(GCE))
    await shell.requeue.close()

    assert shell.stacks.calls == []
    assert shell.status.provisioned("p1") == ("False", PERMANENT_ERROR)


async def test_a_gc_request_refreshes_and_is_marked_handled(shell: Shell) -> None:
    await shell.reconcile(proxy(GCE))
    shell.stacks.calls.clear()
    request = {RECONCILE_REQUEST_ANNOTATION: "2026-11-29T12:01:00Z"}

    patch = await shell.reconcile(proxy(GCE, **request))

    assert shell.stacks.calls == [("up", "crawl.p1", True)]
    handled = patch.metadata.annotations[RECONCILE_HANDLED_ANNOTATION]
    assert handled == "2026-11-29T12:01:00Z"
    assert [event.reason for event in shell.events] == [machine.INSTANCE_MISSING]


async def test_delete_destroys_an_existing_stack_then_lets_go(shell: Shell) -> None:
    await shell.reconcile(proxy(GCE))

    await delete_proxy(shell.components, proxy(GCE))

    assert ("destroy", "crawl.p1", False) in shell.stacks.calls
    assert shell.status.provisioned("p1") == ("False", machine.DELETING)
    secret = f"/api/v1/namespaces/crawl/secrets/{credentials_secret_name('uid-1')}"
    assert ("delete", secret) in shell.api.writes
    assert shell.gone == [proxy_key("crawl", "p1")]


async def test_delete_without_a_stack_releases_without_destroy(shell: Shell) -> None:
    await delete_proxy(shell.components, proxy(GCE))

    assert shell.stacks.calls == []
    assert shell.gone == [proxy_key("crawl", "p1")]


async def test_a_failed_destroy_keeps_the_finalizer_and_retries(shell: Shell) -> None:
    await shell.reconcile(proxy(GCE))
    shell.stacks.failure = "error: timeout"

    with pytest.raises(kopf.TemporaryError) as raised:
        await delete_proxy(shell.components, proxy(GCE))

    assert raised.value.delay == machine.DESTROY_RETRY_SECONDS
    assert shell.gone == []


async def test_deleting_a_proxy_whose_spec_went_bad_still_destroys(shell: Shell) -> None:
    await shell.reconcile(proxy(GCE))

    await delete_proxy(shell.components, proxy({"provider": "gcp", "gcp": {"zone": 7}}))

    assert ("destroy", "crawl.p1", False) in shell.stacks.calls


async def test_a_stale_body_does_not_undo_what_the_operator_wrote(shell: Shell) -> None:
    # kopf may hand a reconcile a body older than the status this operator last
    # wrote (its watch lags under load): the decision starts from the newer one.
    stale = proxy(GCE)
    await shell.reconcile(stale)
    written = shell.status.statuses["p1"]
    assert written.credentials_secret is not None
    shell.stacks.calls.clear()

    await shell.reconcile(stale)

    assert shell.stacks.calls == []
    assert shell.status.statuses["p1"].credentials_secret == written.credentials_secret
    assert shell.status.statuses["p1"].stack == written.stack


async def test_a_dead_pod_that_outlives_the_wait_is_logged_before_up_goes_on(
    shell: Shell, caplog: pytest.LogCaptureFixture
) -> None:
    """The DELETE is accepted but the pod keeps its UID (a stuck kubelet, a finalizer)."""
    shell.api.objects["/api/v1/namespaces/crawl/pods/proxy-uid-1"] = {
        "metadata": {"namespace": "crawl", "name": "proxy-uid-1", "uid": "pod-1"}
    }
    dead = InstanceObservation(
        "pod-1", pod_instance_id("crawl", "proxy-uid-1"), InstanceHealth.DEAD
    )
    view = machine.ProxyView(
        "crawl", "p1", "uid-1", 1, ProxySpec.model_validate(GCE), ProxyStatus()
    )

    with caplog.at_level(logging.WARNING, logger="egress_proxies.proxies.effects"):
        removing = asyncio.create_task(remove_instance(shell.components, view, dead))
        while not removing.done() and shell.clock.monotonic() < 120:
            await asyncio.sleep(0)
            shell.clock.advance(0.5)
        await removing

    assert 30 <= shell.clock.monotonic() < 31, "it gave up after the 30 s wait"
    [warning] = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert "crawl/p1" in warning and "pods/crawl/proxy-uid-1" in warning
    assert "waiting for the replaced pod" in warning and "to be deleted after 30 s" in warning


SHARD_A = Shard("a", parse_selector("shard=a"))


def sharded_proxy(*finalizers: str, **annotations: str) -> JsonObject:
    body = proxy(GCE, **annotations)
    body["metadata"] |= {
        "labels": {"shard": "a"},
        "finalizers": list(finalizers),
        "resourceVersion": "7",
    }
    return body


async def test_a_shard_claims_a_proxy_its_up_took_over(shell: Shell) -> None:
    shell.components.shard = SHARD_A

    patch = await shell.reconcile(sharded_proxy(**{OWNER_ANNOTATION: "b"}))

    assert patch.metadata.annotations[OWNER_ANNOTATION] == "a"


async def test_a_shard_drops_the_unsharded_finalizer_beside_its_own(shell: Shell) -> None:
    shell.components.shard = SHARD_A

    await shell.reconcile(sharded_proxy(FINALIZER, SHARD_A.finalizer))

    assert ("patch", "/apis/crawl.example.com/v1alpha1/namespaces/crawl/proxies/p1") in (
        shell.api.writes
    )


async def test_a_proxy_moved_to_another_shard_is_released_and_its_stack_forgotten(
    shell: Shell,
) -> None:
    registry = kopf.OperatorRegistry()
    shell.components.shard = SHARD_A
    register(registry, shell.components)
    await walk(registry, sharded_proxy())
    moved = sharded_proxy(**{OWNER_ANNOTATION: "b"})
    moved["metadata"]["labels"] = {"shard": "b"}

    await walk(registry, moved, "MODIFIED")

    assert shell.stacks.calls[-1] == ("forget", "crawl.p1", False)
    assert shell.status.latest("crawl", "p1", "uid-1") is None
    assert shell.components.fleet.proxy("crawl", "p1") is None


PROXY_RESOURCE = Resource(GROUP, VERSION, PLURAL, kind=KIND, namespaced=True)


async def walk(
    registry: kopf.OperatorRegistry,
    raw: JsonObject,
    event_type: Literal["ADDED", "MODIFIED"] = "ADDED",
) -> kopf.Patch:
    """One Proxy event through kopf's own matching: the event handlers, then a creation.

    As kopf's processing does: the watching handlers whose filters match,
    the deletion handlers' filters (does the object need the finalizer?),
    then the changing handlers of the cause's reason whose filters match.
    Only an ADDED event is followed by the creation handlers.
    """
    raw_body = cast(kopf.RawBody, raw)
    body, patch, logger = kopf.Body(raw_body), kopf.Patch(), logging.getLogger("walk")
    common: dict[str, Any] = {
        "logger": logger,
        "indices": {},
        "memo": kopf.Memo(),
        "resource": PROXY_RESOURCE,
        "patch": patch,
        "body": body,
    }
    raw_event: kopf.RawEvent = {"type": event_type, "object": raw_body}
    event = WatchingCause(**common, type=event_type, event=raw_event)
    for handler in registry._watching.iter_handlers(event):
        await invoke(handler.fn, kwargsrc=event)
    if event_type != "ADDED":
        return patch
    creation = ChangingCause(**common, initial=False, reason=kopf.Reason.CREATE)
    registry._changing.requires_finalizer(creation)
    for changing in list(registry._changing.iter_handlers(creation)):
        await invoke(changing.fn, kwargsrc=creation)
    return patch


@pytest.mark.parametrize("shard", [None, SHARD_A], ids=["unsharded", "sharded"])
async def test_a_proxys_walk_from_kopf_event_to_status_write_enters_the_shell_twice(
    shell: Shell, shard: Shard | None
) -> None:
    """Control passes into the shell once per kopf handler: the event's, then the creation's.

    The shell is the kopf registration (handlers.py) and what it runs
    (shell.py). Checked with sys.setprofile over kopf's own matching and
    invocation (`walk`): a 'call' of a frame in either file whose caller is in
    neither is one entry (so is a suspended coroutine resumed by the loop).
    The filters kopf calls (`filters.py`) and the rules the shell asks
    (`reconcile.py`, `sharding.py`, `cloud_init.py`) live elsewhere, so a
    decision taken back in the shell between them would show as an entry.
    """
    registry = kopf.OperatorRegistry()
    shell.components.shard = shard
    register(registry, shell.components)
    shell_files = {handlers.__file__, shell_module.__file__}
    entries: list[str] = []

    def count(frame: types.FrameType, what: str, arg: object) -> None:
        caller = frame.f_back
        if (
            what == "call"
            and frame.f_code.co_filename in shell_files
            and (caller is None or caller.f_code.co_filename not in shell_files)
        ):
            entries.append(frame.f_code.co_name)

    previous = sys.getprofile()
    sys.setprofile(count)
    try:
        patch = await walk(registry, sharded_proxy(FINALIZER, SHARD_A.finalizer))
    finally:
        sys.setprofile(previous)

    assert entries == ["proxy_event", "reconcile"]
    # The fleet is fed by its own watches (catalog.feed), not by kopf's events.
    assert shell.components.fleet.proxy("crawl", "p1") is None
    assert shell.status.provisioned("p1") == (ConditionStatus.TRUE.value, machine.CREATED)
    assert (OWNER_ANNOTATION in patch.metadata.annotations) == (shard is not None)
