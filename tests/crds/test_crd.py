"""The checked-in CRD is generated from the models and is a structural schema."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from egress_proxies import crd

pytestmark = pytest.mark.unit

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


def explain_paths(schema: dict[str, Any], path: str) -> list[tuple[str, dict[str, Any]]]:
    """Every path `kubectl explain` accepts below `path`, with its schema.

    explain steps through a list's items and a map's values without naming
    them: `proxy.status.conditions.reason` is a field of each condition.
    """
    found: list[tuple[str, dict[str, Any]]] = []
    for name, prop in schema.get("properties", {}).items():
        found.append((f"{path}.{name}", prop))
        found += explain_paths(prop, f"{path}.{name}")
    for key in ("items", "additionalProperties"):
        if isinstance(schema.get(key), dict):
            found += explain_paths(schema[key], path)
    return found


def test_every_field_of_both_crds_has_a_description() -> None:
    for definition in (crd.proxy_crd(), crd.proxy_pool_crd()):
        root = definition["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
        kind = definition["spec"]["names"]["singular"]
        paths = explain_paths(root, kind)
        assert len(paths) > 50, paths  # the walk reached the nested fields
        assert root["description"]
        # The API server forbids a description on metadata and publishes ObjectMeta's.
        undescribed = [
            path
            for path, schema in paths
            if not schema.get("description") and path != f"{kind}.metadata"
        ]
        assert undescribed == [], (
            "give each field a docstring in model.py or pool_model.py (it is what "
            "`kubectl explain` prints), then render crds/ again"
        )
