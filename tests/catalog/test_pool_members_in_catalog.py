"""A pool's Proxies in the read model: the pool they belong to, and draining ones never leased."""

from __future__ import annotations

from typing import Any

import pytest

from egress_proxies.catalog import record_from_body
from egress_proxies.leases import is_offerable
from egress_proxies.leases.candidates import CandidatePool
from egress_proxies.vocabulary import DRAINING_ANNOTATION, POOL_LABEL

pytestmark = pytest.mark.unit


def body(name: str, *, pool: str | None = None, draining: bool = False) -> dict[str, Any]:
    meta: dict[str, Any] = {"namespace": "ns", "name": name, "uid": f"uid-{name}"}
    if pool:
        meta["labels"] = {POOL_LABEL: pool}
    if draining:
        meta["annotations"] = {DRAINING_ANNOTATION: "2026-01-01T00:00:00Z"}
    return {
        "metadata": meta,
        "spec": {"provider": "kubernetes", "kubernetes": {}},
        "status": {
            "ip": "127.0.0.2",
            "port": 3128,
            "conditions": [
                {
                    "type": "Healthy",
                    "status": "True",
                    "reason": "ProbeSucceeded",
                    "lastTransitionTime": "2026-01-01T00:00:00Z",
                }
            ],
        },
    }


def test_a_draining_proxy_is_healthy_but_never_offered() -> None:
    serving = record_from_body(body("a", pool="eu"), None)
    draining = record_from_body(body("b", pool="eu", draining=True), None)
    assert serving is not None and draining is not None
    assert serving.healthy is True and draining.healthy is True
    assert (serving.draining, draining.draining) == (False, True)
    assert is_offerable(serving) and not is_offerable(draining)
    candidates = CandidatePool.of([serving, draining])
    assert candidates.ranked_keys == ("ns/a",) and candidates.not_offerable == 1


def test_records_name_their_pool() -> None:
    pooled = record_from_body(body("a", pool="eu"), None)
    alone = record_from_body(body("b"), None)
    assert pooled is not None and alone is not None
    assert (pooled.pool, alone.pool) == ("ns/eu", None)
    assert CandidatePool.of([pooled, alone]).pools == frozenset({"ns/eu"})
