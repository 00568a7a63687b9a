"""The shipped Argo CD health check agrees with kstatus on every state of a Proxy and a pool.

The Lua runs in Debian's Lua 5.1 (Argo CD runs gopher-lua, a Lua 5.1) with
the object decoded from JSON as Argo CD hands it over; kstatus is
tools/go/kstatus over sigs.k8s.io/cli-utils.
"""

from __future__ import annotations

import datetime
import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from egress_proxies.model import (
    GROUP,
    HEALTHY,
    INSTANCE_FAILED,
    PENDING_STATUS,
    PERMANENT_ERROR,
    PROVISIONED,
    VERSION,
    Condition,
    ConditionStatus,
    ProxyStatus,
)
from egress_proxies.pool_model import ProxyPoolSpec
from egress_proxies.pools.conditions import Round, pool_conditions
from egress_proxies.pools.plan import Member, plan
from egress_proxies.proxies import reconcile as machine
from egress_proxies.proxies.readiness import summarize
from egress_proxies.proxies.reconcile import set_condition
from harness.kstatus import kstatus

pytestmark = pytest.mark.integration

ARGOCD = Path(__file__).resolve().parents[2] / "deploy" / "argocd"
NOW = "2026-12-04T12:00:00Z"
EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)
T, F = ConditionStatus.TRUE, ConditionStatus.FALSE
ARGO_FOR_KSTATUS = {"Current": "Healthy", "InProgress": "Progressing", "Failed": "Degraded"}
# Run as Argo CD does: `obj` is the object, the script's value is the health.
RUNNER = (
    'local cjson = require("cjson"); obj = cjson.decode(io.read("*a")); '
    "print(cjson.encode(dofile(%s)))"
)


def argo_health(body: dict[str, Any]) -> str:
    lua = shutil.which("lua5.1")
    assert lua, "lua5.1 is not installed: run `make tools` (Debian packages lua5.1, lua-cjson)"
    done = subprocess.run(
        [lua, "-e", RUNNER % json.dumps(str(ARGOCD / "health.lua"))],
        input=json.dumps(body),
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    )
    return str(json.loads(done.stdout)["status"])


def proxy(status: ProxyStatus | None, generation: int = 1) -> dict[str, Any]:
    body: dict[str, Any] = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "Proxy",
        "metadata": {"name": "p1", "namespace": "crawl", "generation": generation},
        "spec": {"provider": "kubernetes", "kubernetes": {}},
    }
    if status is not None:
        body["status"] = status.model_dump(mode="json", by_alias=True, exclude_none=True)
    return body


def proxy_status(
    provisioned: tuple[ConditionStatus, str] | None,
    healthy: ConditionStatus | None = None,
    *,
    draining: bool = False,
    deleting: bool = False,
) -> ProxyStatus:
    conditions: list[Condition] = []
    if provisioned is not None:
        conditions = set_condition(
            conditions, PROVISIONED, provisioned[0], reason=provisioned[1], message="m", now=NOW
        )
    if healthy is not None:
        conditions = set_condition(conditions, HEALTHY, healthy, reason="r", message="", now=NOW)
    return summarize(
        ProxyStatus(observed_generation=1, conditions=conditions),
        generation=1,
        deleting=deleting,
        draining=draining,
        now=NOW,
    )


PROXY_STATES = {
    "new": proxy_status(None),
    "provisioning": proxy_status((F, machine.PROVISIONING)),
    "instance failed": proxy_status((F, INSTANCE_FAILED)),
    "awaiting health": proxy_status((T, machine.CREATED)),
    "unhealthy": proxy_status((T, machine.CREATED), F),
    "ready": proxy_status((T, machine.CREATED), T),
    "draining": proxy_status((T, machine.CREATED), T, draining=True),
    "permanent error": proxy_status((F, PERMANENT_ERROR)),
}


@pytest.mark.parametrize("state", sorted(PROXY_STATES))
async def test_proxy_health_is_kstatus(state: str) -> None:
    body = proxy(PROXY_STATES[state])
    verdict = await kstatus(body)
    assert argo_health(body) == ARGO_FOR_KSTATUS[verdict.status], (state, verdict)


async def test_an_unobserved_generation_is_progressing_for_both() -> None:
    body = proxy(PROXY_STATES["ready"], generation=2)
    assert (await kstatus(body)).status == "InProgress"
    assert argo_health(body) == "Progressing"


async def test_the_crds_default_status_is_progressing_for_both() -> None:
    body = proxy(None)
    body["status"] = PENDING_STATUS
    assert (await kstatus(body)).status == "InProgress"
    assert argo_health(body) == "Progressing"


def test_with_no_status_at_all_argo_waits_where_kstatus_says_current() -> None:
    # An object stored before the CRD had its default status.
    assert argo_health(proxy(None)) == "Progressing"


def pool(members: list[Member], replicas: int) -> dict[str, Any]:
    spec = ProxyPoolSpec.model_validate(
        {"replicas": replicas, "template": {"spec": {"provider": "kubernetes"}}}
    )
    step = plan(spec, "h1", members, EPOCH + datetime.timedelta(seconds=1000), 3600.0)
    conditions = pool_conditions(Round(spec, members, step, "h1", None, 3), [], NOW)
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "ProxyPool",
        "metadata": {"name": "fleet", "namespace": "crawl", "generation": 3},
        "spec": spec.model_dump(mode="json", by_alias=True, exclude_none=True),
        "status": {
            "observedGeneration": 3,
            "conditions": [c.model_dump(mode="json", by_alias=True) for c in conditions],
        },
    }


def member(name: str, ready: bool = True, **extra: Any) -> Member:
    return Member(name, EPOCH, ready, 0, 0, extra.pop("template_hash", "h1"), **extra)


POOL_STATES = {
    "ready": pool([member("a"), member("b")], 2),
    "scaling up": pool([member("a"), member("b"), member("c", ready=False)], 4),
    "rolling": pool([member("a", template_hash="h0"), member("b")], 2),
    "draining": pool(
        [
            member("a"),
            member("b"),
            member("c", draining_since=EPOCH + datetime.timedelta(seconds=900)),
        ],
        2,
    ),
    "stalled": pool([member("a", ready=False, failure="spec.gcp is required")], 1),
}


@pytest.mark.parametrize("state", sorted(POOL_STATES))
async def test_pool_health_is_kstatus(state: str) -> None:
    body = POOL_STATES[state]
    verdict = await kstatus(body)
    assert argo_health(body) == ARGO_FOR_KSTATUS[verdict.status], (state, verdict)


def test_the_argocd_cm_patch_carries_the_script_for_both_kinds() -> None:
    patch = yaml.safe_load((ARGOCD / "argocd-cm-patch.yaml").read_text())
    script = (ARGOCD / "health.lua").read_text()
    prefix = f"resource.customizations.health.{GROUP}_"
    assert patch["data"] == {f"{prefix}Proxy": script, f"{prefix}ProxyPool": script}
