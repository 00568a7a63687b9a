"""Every branch of the reconcile state machine, without a cluster."""

from __future__ import annotations

import datetime
from typing import Any

import pytest

from egress_proxies.model import (
    PERMANENT_ERROR,
    PROVISIONED,
    Phase,
    ProxySpec,
    ProxyStatus,
    compute_phase,
    find_condition,
)
from egress_proxies.proxies import reconcile as machine
from egress_proxies.proxies.credentials import credentials_secret_name
from egress_proxies.proxies.reconcile import Action, Observed, ProxyView, decide, spec_hash
from egress_proxies.stacks.backends import StackState
from egress_proxies.stacks.errors import ErrorClass

pytestmark = pytest.mark.unit

NOW = datetime.datetime(2026, 11, 29, 12, tzinfo=datetime.UTC)
LATER = NOW + datetime.timedelta(minutes=5)

MANAGED: dict[str, Any] = {"provider": "kubernetes", "kubernetes": {}}
EXTERNAL: dict[str, Any] = {"mode": "External", "endpoint": {"host": "10.0.0.9", "port": 8080}}


def view(spec: dict[str, Any] = MANAGED, **overrides: Any) -> ProxyView:
    fields: dict[str, Any] = {
        "namespace": "crawl",
        "name": "p1",
        "uid": "uid-1",
        "generation": 1,
        "spec": ProxySpec.model_validate(spec),
        "status": ProxyStatus(),
    }
    fields.update(overrides)
    return ProxyView(**fields)


def stack(outputs: dict[str, Any] | None = None, *, pending: int = 0) -> StackState:
    return StackState(
        name="crawl.p1",
        outputs=outputs or {},
        pending_operations=pending,
        resource_count=4 if outputs else 0,
    )


def current_outputs(
    spec: dict[str, Any] = MANAGED, cloud_init: str | None = None
) -> dict[str, Any]:
    return {
        "ip": "127.9.0.2",
        "port": 3128,
        "instanceId": "crawl/proxy-abc",
        "specHash": spec_hash(ProxySpec.model_validate(spec), cloud_init),
    }


def provisioned(status: ProxyStatus) -> tuple[str, str]:
    condition = find_condition(status.conditions, PROVISIONED)
    assert condition is not None
    return condition.status.value, condition.reason


def test_a_new_proxy_is_provisioned() -> None:
    decision = decide(view(), Observed(), NOW)
    assert decision.action == Action.UP
    assert decision.spec_hash == spec_hash(ProxySpec.model_validate(MANAGED), None)
    assert provisioned(decision.status) == ("False", machine.PROVISIONING)
    assert decision.status.observed_generation == 1
    assert compute_phase(decision.status, deleting=False) == Phase.PROVISIONING


def test_a_stack_that_matches_is_adopted_without_running_pulumi() -> None:
    decision = decide(view(), Observed(stack=stack(current_outputs())), NOW)
    assert decision.action == Action.ADOPT
    assert decision.status.ip == "127.9.0.2"
    assert decision.status.port == 3128
    assert provisioned(decision.status) == ("True", machine.CREATED)


def test_a_stack_finished_after_its_handler_was_cancelled_is_adopted_with_its_names() -> None:
    """An operator stopped mid-`up` wrote no status; the next one takes the names from the Proxy."""
    decision = decide(view(), Observed(stack=stack(current_outputs())), NOW)
    assert decision.status.stack == "crawl.p1"
    assert decision.status.credentials_secret == credentials_secret_name("uid-1")


def test_an_unchanged_proxy_needs_nothing() -> None:
    wanted = spec_hash(ProxySpec.model_validate(MANAGED), None)
    decision = decide(view(recorded_hash=wanted), Observed(stack=stack(current_outputs())), NOW)
    assert decision.action == Action.NONE
    assert decision.retry_after is None and not decision.permanent


def test_a_spec_change_replaces_the_instance() -> None:
    changed = {"provider": "kubernetes", "kubernetes": {"image": "ubuntu/squid:7"}}
    old_hash = spec_hash(ProxySpec.model_validate(MANAGED), None)
    decision = decide(
        view(changed, recorded_hash=old_hash), Observed(stack=stack(current_outputs())), NOW
    )
    assert decision.action == Action.UP
    assert decision.spec_hash != old_hash
    assert provisioned(decision.status) == ("False", machine.REPLACING)


def test_a_cloud_init_change_replaces_the_instance() -> None:
    outputs = current_outputs(cloud_init="#cloud-config\na: 1\n")
    spec = {**MANAGED, "cloudInit": {"secretRef": {"name": "init"}}}
    observed = Observed(stack=stack(outputs), cloud_init="#cloud-config\na: 2\n")
    assert decide(view(spec), observed, NOW).action == Action.UP


def test_attributes_health_and_lease_settings_do_not_touch_the_instance() -> None:
    base = ProxySpec.model_validate(MANAGED)
    edited = ProxySpec.model_validate(
        {
            **MANAGED,
            "attributes": {"region": "eu"},
            "maxLeases": 5,
            "healthCheck": {"url": "http://127.0.0.1/"},
        }
    )
    assert spec_hash(base, None) == spec_hash(edited, None)


def test_unfinished_operations_are_resolved_by_running_up() -> None:
    observed = Observed(stack=stack(current_outputs(), pending=1))
    assert decide(view(), observed, NOW).action == Action.UP


def test_deleting_with_a_stack_destroys_it() -> None:
    decision = decide(view(deleting=True), Observed(stack=stack(current_outputs())), NOW)
    assert decision.action == Action.DESTROY
    assert provisioned(decision.status) == ("False", machine.DELETING)
    assert compute_phase(decision.status, deleting=True) == Phase.DELETING


def test_deleting_without_a_stack_releases_the_finalizer() -> None:
    assert decide(view(deleting=True), Observed(), NOW).action == Action.RELEASE


def test_external_proxies_have_no_stack_and_take_the_endpoint_address() -> None:
    decision = decide(view(EXTERNAL), Observed(), NOW)
    assert decision.action == Action.NONE
    assert (decision.status.ip, decision.status.port) == ("10.0.0.9", 8080)
    assert provisioned(decision.status) == ("True", machine.EXTERNAL_ENDPOINT)
    assert compute_phase(decision.status, deleting=False) == Phase.PROVISIONED


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        ({"provider": "kubernetes"}, "spec.kubernetes"),
        ({"provider": "gcp"}, "spec.gcp"),
        ({}, "spec.provider"),
    ],
)
def test_a_missing_provider_block_is_a_permanent_failure(spec: dict[str, Any], field: str) -> None:
    decision = decide(view(spec), Observed(), NOW)
    assert decision.action == Action.NONE and decision.permanent
    condition = find_condition(decision.status.conditions, PROVISIONED)
    assert condition is not None and condition.reason == PERMANENT_ERROR
    assert field in condition.message
    assert condition.observed_generation == 1
    assert compute_phase(decision.status, deleting=False) == Phase.FAILED


def test_a_permanent_failure_is_latched_until_the_generation_changes() -> None:
    failed = decide(view({"provider": "gcp"}), Observed(), NOW).status
    latched = decide(view(MANAGED, status=failed), Observed(), LATER)
    assert latched.action == Action.NONE and latched.permanent
    assert latched.status == failed
    recovered = decide(view(MANAGED, status=failed, generation=2), Observed(), LATER)
    assert recovered.action == Action.UP
    assert provisioned(recovered.status) == ("False", machine.PROVISIONING)


def test_quota_waits_slowly_and_never_fails() -> None:
    decision = machine.after_failure(view(), ErrorClass.QUOTA, "Quota 'CPUS' exceeded", NOW)
    assert decision.retry_after == machine.QUOTA_RETRY_SECONDS
    assert not decision.permanent
    assert provisioned(decision.status) == ("False", machine.QUOTA_EXCEEDED)
    assert compute_phase(decision.status, deleting=False) == Phase.PROVISIONING


def test_a_permanent_provider_error_fails_the_proxy() -> None:
    decision = machine.after_failure(view(), ErrorClass.PERMANENT, "error: 403 forbidden", NOW)
    assert decision.permanent
    assert compute_phase(decision.status, deleting=False) == Phase.FAILED


def test_a_transient_error_retries_after_the_first_backoff() -> None:
    decision = machine.after_failure(view(), ErrorClass.TRANSIENT, "connection reset", NOW)
    assert not decision.permanent
    assert decision.retry_after is not None and 4.0 <= decision.retry_after <= 6.0
    assert provisioned(decision.status) == ("False", machine.TRANSIENT_ERROR)
    assert decision.status.backoff is not None and decision.status.backoff.failures == 1


def test_a_permanent_error_while_deleting_keeps_retrying() -> None:
    decision = machine.after_failure(view(deleting=True), ErrorClass.PERMANENT, "403", NOW)
    assert not decision.permanent
    assert provisioned(decision.status) == ("False", machine.TRANSIENT_ERROR)


def test_a_missing_cloud_init_secret_is_reported_and_retried() -> None:
    spec = {**MANAGED, "cloudInit": {"secretRef": {"name": "init"}}}
    decision = decide(view(spec), Observed(cloud_init_error="Secret init not found"), NOW)
    assert decision.action == Action.NONE
    assert decision.retry_after == machine.CLOUD_INIT_RETRY_SECONDS
    assert provisioned(decision.status) == ("False", machine.CLOUD_INIT_ERROR)


def test_after_up_takes_the_address_from_the_outputs() -> None:
    status = machine.after_up(view(), current_outputs(), "crawl.p1", NOW).status
    assert (status.ip, status.port, status.stack) == ("127.9.0.2", 3128, "crawl.p1")
    assert provisioned(status) == ("True", machine.CREATED)


def test_after_up_without_an_address_is_still_provisioning() -> None:
    status = machine.after_up(view(), {"ip": None, "port": 3128}, "crawl.p1", NOW).status
    assert provisioned(status) == ("False", machine.PROVISIONING)


def test_an_instance_gone_from_its_provider_is_recreated_with_a_refresh_and_an_event() -> None:
    decision = decide(view(), Observed(stack=stack(current_outputs()), instance_missing=True), NOW)
    assert decision.action == Action.UP and decision.refresh
    assert [event.reason for event in decision.events] == [machine.INSTANCE_MISSING]
