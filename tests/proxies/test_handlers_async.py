"""kopf runs sync handlers in worker threads; the fleet is read on the event loop unlocked.

So every handler that reads or writes shared state must be async. A sync
event handler let the health engine's iteration of the fleet die with
"dictionary changed size during iteration" when 150 Proxies arrived at once.
"""

from __future__ import annotations

import dataclasses
import inspect
from typing import Any

import kopf
import pytest

from egress_proxies.proxies.components import Components
from egress_proxies.proxies.handlers import register

pytestmark = pytest.mark.unit


def test_every_resource_handler_runs_on_the_event_loop() -> None:
    registry = kopf.OperatorRegistry()
    placeholders: dict[str, Any] = {f.name: None for f in dataclasses.fields(Components)}
    register(registry, Components(**placeholders))
    # kopf has no public listing of registered handlers; these are its registries.
    handlers = [
        *registry._watching.get_all_handlers(),
        *registry._changing.get_all_handlers(),
    ]
    assert len(handlers) >= 7, handlers
    sync = [handler.id for handler in handlers if not inspect.iscoroutinefunction(handler.fn)]
    assert sync == [], f"sync handlers run in kopf's thread pool: {sync}"
