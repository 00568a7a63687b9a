"""Render the Proxy and ProxyPool CustomResourceDefinitions from the pydantic models.

Kubernetes wants a *structural* OpenAPI schema: no $ref, no anyOf-with-null,
no `additionalProperties: false` next to `properties`. This module inlines
the models' JSON schema into that shape and adds the CRD's CEL rules (they
travel on the models as `x-kubernetes-validations`), printer columns, the
status (and, for pools, scale) subresource, and the status a new object
shows until the operator writes one (`model.PENDING_STATUS`). `crds/proxy.yaml` and
`crds/proxypool.yaml` are its output, checked in.
"""

from __future__ import annotations

import copy
from typing import Any

import yaml

from egress_proxies.model import (
    GROUP,
    KIND,
    PENDING_STATUS,
    PLURAL,
    SHORT_NAME,
    VERSION,
    ProxySpec,
    ProxyStatus,
)
from egress_proxies.pool_model import (
    POOL_KIND,
    POOL_PLURAL,
    POOL_SHORT_NAME,
    ProxyPoolSpec,
    ProxyPoolStatus,
)

Schema = dict[str, Any]

_DROPPED_KEYS = frozenset({"title", "$defs"})

PRINTER_COLUMNS: list[dict[str, Any]] = [
    {"name": "Phase", "type": "string", "jsonPath": ".status.phase"},
    {
        "name": "Ready",
        "type": "string",
        "jsonPath": '.status.conditions[?(@.type=="Ready")].status',
    },
    {"name": "IP", "type": "string", "jsonPath": ".status.ip"},
    {"name": "Provider", "type": "string", "jsonPath": ".spec.provider"},
    {
        "name": "Healthy",
        "type": "string",
        "jsonPath": '.status.conditions[?(@.type=="Healthy")].status',
    },
    {"name": "Latency", "type": "integer", "jsonPath": ".status.latencyMillis"},
    {
        "name": "Draining",
        "type": "string",
        "jsonPath": ".metadata.annotations.crawl\\.example\\.com/draining",
        "priority": 1,
    },
    {"name": "Cordoned", "type": "boolean", "jsonPath": ".spec.cordoned", "priority": 1},
    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
]

POOL_PRINTER_COLUMNS: list[dict[str, Any]] = [
    {"name": "Desired", "type": "integer", "jsonPath": ".spec.replicas"},
    {"name": "Current", "type": "integer", "jsonPath": ".status.replicas"},
    {"name": "Ready", "type": "integer", "jsonPath": ".status.readyReplicas"},
    {"name": "Leased", "type": "integer", "jsonPath": ".status.leasedReplicas"},
    {"name": "Draining", "type": "integer", "jsonPath": ".status.drainingReplicas"},
    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
]


def structural(schema: Schema, definitions: dict[str, Schema] | None = None) -> Schema:
    """Inline refs and strip what a CRD schema may not contain."""
    definitions = schema.get("$defs", {}) if definitions is None else definitions
    if "$ref" in schema:
        target = definitions[schema["$ref"].rsplit("/", 1)[-1]]
        merged = {**copy.deepcopy(target), **{k: v for k, v in schema.items() if k != "$ref"}}
        return structural(merged, definitions)
    options = schema.get("anyOf")
    if options is not None:
        concrete = [option for option in options if option.get("type") != "null"]
        if len(concrete) != 1:
            raise ValueError(f"a CRD schema cannot express anyOf {options}")
        rest = {k: v for k, v in schema.items() if k not in ("anyOf", "default")}
        return structural({**concrete[0], **rest}, definitions)
    result: Schema = {}
    for key, value in schema.items():
        if key in _DROPPED_KEYS or (key == "default" and value is None):
            continue
        if key == "additionalProperties" and value is False:
            continue
        result[key] = _structural_value(key, value, definitions)
    return result


def _structural_value(key: str, value: Any, definitions: dict[str, Schema]) -> Any:
    if key == "properties":
        return {name: structural(prop, definitions) for name, prop in value.items()}
    if key in ("items", "additionalProperties") and isinstance(value, dict):
        return structural(value, definitions)
    if key == "default":
        return _without_nulls(value)
    if key == "description":
        return _unwrapped(value)
    return value


def _unwrapped(docstring: str) -> str:
    """A docstring as `kubectl explain` should wrap it: paragraphs, each on one line."""
    return "\n\n".join(" ".join(paragraph.split()) for paragraph in docstring.split("\n\n"))


def _without_nulls(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _without_nulls(v) for k, v in value.items() if v is not None}
    return value


def _status_schema(model: type[ProxyStatus] | type[ProxyPoolStatus]) -> Schema:
    schema = structural(model.model_json_schema(by_alias=True))
    schema["default"] = copy.deepcopy(PENDING_STATUS)
    conditions = schema["properties"]["conditions"]
    conditions["x-kubernetes-list-type"] = "map"
    conditions["x-kubernetes-list-map-keys"] = ["type"]
    return schema


def _crd(
    *,
    kind: str,
    plural: str,
    short_name: str,
    description: str,
    spec_schema: Schema,
    status_schema: Schema,
    printer_columns: list[dict[str, Any]],
    subresources: dict[str, Any],
) -> dict[str, Any]:
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{GROUP}"},
        "spec": {
            "group": GROUP,
            "names": {
                "kind": kind,
                "listKind": f"{kind}List",
                "plural": plural,
                "singular": kind.lower(),
                "shortNames": [short_name],
                "categories": ["all"],
            },
            "scope": "Namespaced",
            "versions": [
                {
                    "name": VERSION,
                    "served": True,
                    "storage": True,
                    "subresources": subresources,
                    "additionalPrinterColumns": printer_columns,
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "description": description,
                            "required": ["spec"],
                            "properties": {
                                "apiVersion": {
                                    "type": "string",
                                    "description": f"The object's schema: {GROUP}/{VERSION}.",
                                },
                                "kind": {
                                    "type": "string",
                                    "description": f"The object's kind: {kind}.",
                                },
                                # Nothing but its type: the API server forbids more here, and
                                # publishes ObjectMeta's schema and description in its place.
                                "metadata": {"type": "object"},
                                "spec": spec_schema,
                                "status": status_schema,
                            },
                        }
                    },
                }
            ],
        },
    }


def proxy_crd() -> dict[str, Any]:
    """The Proxy CustomResourceDefinition object."""
    return _crd(
        kind=KIND,
        plural=PLURAL,
        short_name=SHORT_NAME,
        description="An egress proxy for crawlers, managed or external.",
        spec_schema=structural(ProxySpec.model_json_schema(by_alias=True)),
        status_schema=_status_schema(ProxyStatus),
        printer_columns=PRINTER_COLUMNS,
        subresources={"status": {}},
    )


def proxy_pool_crd() -> dict[str, Any]:
    """The ProxyPool CustomResourceDefinition object, with the scale subresource."""
    return _crd(
        kind=POOL_KIND,
        plural=POOL_PLURAL,
        short_name=POOL_SHORT_NAME,
        description="A fleet of Proxies from one template: scaled, rolled, rotated, drained.",
        spec_schema=structural(ProxyPoolSpec.model_json_schema(by_alias=True)),
        status_schema=_status_schema(ProxyPoolStatus),
        printer_columns=POOL_PRINTER_COLUMNS,
        subresources={
            "status": {},
            "scale": {
                "specReplicasPath": ".spec.replicas",
                "statusReplicasPath": ".status.replicas",
                "labelSelectorPath": ".status.selector",
            },
        },
    )


def render() -> str:
    """The CRD as the YAML checked in at crds/proxy.yaml."""
    header = "# Generated by `egress-proxies crd` from egress_proxies/model.py. Do not edit.\n"
    return header + yaml.safe_dump(proxy_crd(), sort_keys=False, width=100)


def render_pool() -> str:
    """The CRD as the YAML checked in at crds/proxypool.yaml."""
    header = (
        "# Generated by `egress-proxies crd proxypool` from egress_proxies/pool_model.py."
        " Do not edit.\n"
    )
    return header + yaml.safe_dump(proxy_pool_crd(), sort_keys=False, width=100)
