"""The checked-in CRD is generated from the models and is a structural schema."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from egress_proxies import crd

CHECKED_IN = Path(__file__).resolve().parents[2] / "crds" / "proxy.yaml"


def test_checked_in_crd_is_current() -> None:
    assert CHECKED_IN.read_text() == crd.render(), (
        "crds/proxy.yaml is stale: run `.venv/bin/egress-proxies crd > crds/proxy.yaml`"
    )


def walk(schema: Any) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    if isinstance(schema, dict):
        found.append(schema)
        for value in schema.values():
            found += walk(value)
    elif isinstance(schema, list):
        for value in schema:
            found += walk(value)
    return found


def test_schema_is_structural() -> None:
    version = crd.proxy_crd()["spec"]["versions"][0]
    nodes = walk(version["schema"]["openAPIV3Schema"])
    for node in nodes:
        assert "$ref" not in node and "anyOf" not in node and "title" not in node
        assert node.get("additionalProperties") is not False
        assert node.get("default", 0) is not None


def test_conditions_are_a_map_keyed_by_type() -> None:
    status = crd.proxy_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"][
        "status"
    ]
    conditions = status["properties"]["conditions"]
    assert conditions["x-kubernetes-list-type"] == "map"
    assert conditions["x-kubernetes-list-map-keys"] == ["type"]


def test_a_new_object_is_pending_until_the_operator_writes_its_status() -> None:
    for definition in (crd.proxy_crd(), crd.proxy_pool_crd()):
        schema = definition["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
        default = schema["properties"]["status"]["default"]
        assert {(c["type"], c["status"], c["reason"]) for c in default["conditions"]} == {
            ("Ready", "False", "Pending"),
            ("Reconciling", "True", "Pending"),
        }


def test_printer_columns() -> None:
    columns = [
        c["name"] for c in crd.proxy_crd()["spec"]["versions"][0]["additionalPrinterColumns"]
    ]
    assert columns == [
        "Phase",
        "Ready",
        "IP",
        "Provider",
        "Healthy",
        "Latency",
        "Draining",
        "Cordoned",
        "Age",
    ]


POOL_CHECKED_IN = CHECKED_IN.parent / "proxypool.yaml"


def test_checked_in_pool_crd_is_current() -> None:
    assert POOL_CHECKED_IN.read_text() == crd.render_pool(), (
        "crds/proxypool.yaml is stale: run "
        "`.venv/bin/egress-proxies crd proxypool > crds/proxypool.yaml`"
    )


def test_pool_schema_is_structural() -> None:
    version = crd.proxy_pool_crd()["spec"]["versions"][0]
    for node in walk(version["schema"]["openAPIV3Schema"]):
        assert "$ref" not in node and "anyOf" not in node and "title" not in node
        assert node.get("additionalProperties") is not False
        assert node.get("default", 0) is not None


def test_pool_has_the_scale_subresource_and_columns() -> None:
    version = crd.proxy_pool_crd()["spec"]["versions"][0]
    assert version["subresources"]["scale"] == {
        "specReplicasPath": ".spec.replicas",
        "statusReplicasPath": ".status.replicas",
        "labelSelectorPath": ".status.selector",
    }
    columns = [c["name"] for c in version["additionalPrinterColumns"]]
    assert columns == ["Desired", "Current", "Ready", "Leased", "Draining", "Age"]
