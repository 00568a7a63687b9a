"""The fleet keeps only what its readers use of a Proxy body."""

from __future__ import annotations

import gc
import json
import tracemalloc
from typing import Any

import pytest

from egress_proxies.catalog.fleet import Fleet
from egress_proxies.vocabulary import POOL_LABEL

pytestmark = pytest.mark.unit


def test_a_kept_body_drops_managed_fields_and_kopfs_annotations() -> None:
    fleet = Fleet()
    fleet.put_proxy(
        {
            "apiVersion": "crawl.example.com/v1alpha1",
            "kind": "Proxy",
            "metadata": {
                "name": "p1",
                "namespace": "crawl",
                "uid": "u1",
                "generation": 3,
                "labels": {"pool": "eu"},
                "resourceVersion": "42",
                "managedFields": [{"manager": "kopf", "fieldsV1": {"f:spec": {}}}],
                "annotations": {
                    "kopf.crawl.example.com/last-handled-configuration": '{"spec": {}}',
                    "crawl.example.com/spec-hash": "abc",
                },
            },
            "spec": {"mode": "External", "endpoint": {"host": "10.0.0.1", "port": 3128}},
            "status": {"phase": "Ready"},
        }
    )
    kept = fleet.proxy("crawl", "p1")
    assert kept == {
        "metadata": {
            "name": "p1",
            "namespace": "crawl",
            "uid": "u1",
            "generation": 3,
            "labels": {"pool": "eu"},
            "annotations": {"crawl.example.com/spec-hash": "abc"},
        },
        "spec": {"mode": "External", "endpoint": {"host": "10.0.0.1", "port": 3128}},
        "status": {"phase": "Ready"},
    }
    assert fleet.proxy_by_uid("u1") == kept
    assert [record.host for record in fleet.records()] == ["10.0.0.1"]


def managed_body(index: int, pool: str | None = None) -> dict[str, Any]:
    """A Ready managed Proxy as the watch delivers it (the parts the fleet keeps)."""
    name = f"p{index:05d}"
    return {
        "metadata": {
            "name": name,
            "namespace": "crawl",
            "uid": f"6f1c2a8e-3b7d-4b0e-9a57-{index:012d}",
            "generation": 1,
            "labels": {POOL_LABEL: pool} if pool else {"app": "crawler"},
            "creationTimestamp": "2026-12-02T05:01:02Z",
        },
        "spec": {
            "mode": "Managed",
            "provider": "kubernetes",
            "maxLeases": 1,
            "attributes": {"pool": "eu", "region": "eu-west"},
            "healthCheck": {"url": "http://origin.example/", "intervalSeconds": 10},
        },
        "status": {
            "phase": "Ready",
            "observedGeneration": 1,
            "ip": f"10.0.{index // 256}.{index % 256}",
            "port": 3128,
            "stack": f"crawl.{name}",
            "credentialsSecret": f"proxy-{name}-credentials",
            "latencyMillis": 12,
            "lastHealthCheckTime": "2026-12-02T05:03:04.123456Z",
            "conditions": [
                {
                    "type": kind,
                    "status": "True",
                    "reason": "Ok",
                    "message": "the stack is up and the pod answers",
                    "lastTransitionTime": "2026-12-02T05:02:03Z",
                }
                for kind in ("Provisioned", "Healthy")
            ],
        },
    }


def test_a_kept_body_costs_a_fifth_of_the_parsed_one() -> None:
    # Parsed, such a slim body is about 5.7 KiB of dicts and strings; kept as JSON, 1.1 KiB.
    count = 1_000
    fleet = Fleet()
    events = [json.dumps(managed_body(index)) for index in range(count)]
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for event in events:  # parsed as the watch parses each event; kept as the fleet keeps it
            fleet.put_proxy(json.loads(event))
        gc.collect()
        per_proxy = (tracemalloc.get_traced_memory()[0] - before) / count
    finally:
        tracemalloc.stop()
    assert per_proxy < 1.8 * 1024, per_proxy
    assert fleet.proxy("crawl", "p00007") == managed_body(7)


def test_pool_members_are_the_proxies_labelled_with_that_pool_in_that_namespace() -> None:
    fleet = Fleet()
    fleet.put_proxy(managed_body(1, pool="eu"))
    fleet.put_proxy(managed_body(2, pool="us"))
    fleet.put_proxy(managed_body(3))
    other = managed_body(4, pool="eu")
    other["metadata"]["namespace"] = "elsewhere"
    fleet.put_proxy(other)
    assert [m["metadata"]["name"] for m in fleet.pool_members("crawl", "eu")] == ["p00001"]

    moved = managed_body(2, pool="eu")
    fleet.put_proxy(moved)  # relabelled into the pool
    assert {m["metadata"]["name"] for m in fleet.pool_members("crawl", "eu")} == {
        "p00001",
        "p00002",
    }
    fleet.put_proxy(managed_body(1))  # label removed
    fleet.remove_proxy("crawl", "p00002")
    assert fleet.pool_members("crawl", "eu") == []
    assert fleet.proxy_by_uid(moved["metadata"]["uid"]) is None
