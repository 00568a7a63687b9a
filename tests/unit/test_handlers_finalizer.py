"""kopf puts our finalizer on Managed Proxies only: an External one has nothing to tear down."""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

import kopf
import pytest
from kopf._cogs.structs import bodies, patches, references
from kopf._core.intents import causes

from egress_proxies.model import GROUP, PLURAL, VERSION
from egress_proxies.operator.handlers import Components, register

PROXIES = references.Resource(GROUP, VERSION, PLURAL, kind="Proxy", namespaced=True)


def requires_finalizer(spec: dict[str, Any]) -> bool:
    """kopf's own decision, as its reactor asks it before running any handler."""
    registry = kopf.OperatorRegistry()
    placeholders: dict[str, Any] = {f.name: None for f in dataclasses.fields(Components)}
    register(registry, Components(**placeholders))
    raw = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "Proxy",
        "metadata": {"namespace": "crawl", "name": "p1", "uid": "uid-1"},
        "spec": spec,
    }
    # kopf has no public way to ask this; these are its reactor's own objects.
    cause = causes.ChangingCause(
        logger=logging.getLogger(__name__),
        indices={},
        memo=kopf.Memo(),  # type: ignore[arg-type]
        resource=PROXIES,
        patch=patches.Patch(),
        body=bodies.Body(raw),  # type: ignore[arg-type]
        initial=False,
        reason=causes.Reason.NOOP,
    )
    return registry._changing.requires_finalizer(cause=cause)


@pytest.mark.parametrize(
    "spec",
    [
        {"mode": "Managed", "provider": "kubernetes"},
        {"provider": "kubernetes"},  # mode defaults to Managed
    ],
)
def test_a_managed_proxy_gets_the_finalizer(spec: dict[str, Any]) -> None:
    assert requires_finalizer(spec)


def test_an_external_proxy_gets_none() -> None:
    spec = {"mode": "External", "endpoint": {"host": "10.0.0.1", "port": 3128}}
    assert not requires_finalizer(spec)
