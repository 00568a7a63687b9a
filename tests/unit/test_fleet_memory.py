"""The fleet keeps only what its readers use of a Proxy body."""

from __future__ import annotations

from egress_proxies.catalog.fleet import Fleet


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
