"""Core Kubernetes objects declared by type token, without pulumi-kubernetes' typed SDK.

The typed SDK's `core.v1.Pod`, `Secret` and `ConfigMap` load every core/v1
input and output class with them: 16 MiB of the operator's RSS, for three
constructors that do nothing a program here needs. The Squid pod program
builds its objects as camelCase dicts already, so each is declared as a
`pulumi.CustomResource` with what the typed class would send: the same type
token, `apiVersion` and `kind`, the provider version of the installed
pulumi-kubernetes package, and, for a Secret, its `data` and `stringData`
outputs kept secret. A stack created by the typed classes sees no change
(`tests/stacks/test_core_objects.py`).
"""

from __future__ import annotations

import importlib.metadata
from collections.abc import Mapping
from typing import Any

import pulumi

# The provider plugin version the typed SDK asks the engine for: its own.
PROVIDER_VERSION = importlib.metadata.version("pulumi-kubernetes")
# Outputs the typed Secret class marks secret, whatever the inputs were.
_SECRET_OUTPUTS = {"Secret": ["data", "stringData"]}


class CoreObject(pulumi.CustomResource):
    """One core/v1 object of `kind`; `body` holds its other top-level fields."""

    metadata: pulumi.Output[Any]  # the applied object's metadata, as the SDK resolves it

    def __init__(self, kind: str, name: str, body: Mapping[str, Any]) -> None:
        props = {"apiVersion": "v1", "kind": kind, **body}
        opts = pulumi.ResourceOptions(
            version=PROVIDER_VERSION, additional_secret_outputs=_SECRET_OUTPUTS.get(kind)
        )
        super().__init__(f"kubernetes:core/v1:{kind}", name, props, opts)
