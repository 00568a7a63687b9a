"""Everything the Proxy controller's handlers use, built by the composition root."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from egress_proxies.catalog import ProxyKey
from egress_proxies.catalog.fleet import Fleet
from egress_proxies.clock import Clock
from egress_proxies.events import EventSink
from egress_proxies.model import (
    DEFAULT_SQUID_IMAGE,
    ProviderName,
)
from egress_proxies.proxies import reconcile as machine
from egress_proxies.proxies.backoff import RetryPolicy
from egress_proxies.proxies.instances import InstanceCache
from egress_proxies.proxies.ports import ApiClient, Stacks, StatusSink
from egress_proxies.proxies.requeue import Requeue
from egress_proxies.proxies.sharding import Shard
from egress_proxies.proxies.standby import Gate, never_paused
from egress_proxies.proxies.status import regarding
from egress_proxies.proxies.wakeup import Bell
from egress_proxies.stacks.errors import ErrorClass
from egress_proxies.stacks.inputs import ProgramInputs
from egress_proxies.telemetry.metrics import StackMetrics
from egress_proxies.telemetry.tracing import Spans

Program = Callable[[ProgramInputs], None]
PostEvent = Callable[[Mapping[str, Any], machine.Event], None]


def event_poster(sink: EventSink) -> PostEvent:
    """Post the reconciler's Events about a Proxy through the aggregating recorder."""

    def post(body: Mapping[str, Any], event: machine.Event) -> None:
        sink.record(regarding(body), event.type, event.reason, event.message)

    return post


@dataclass
class Components:
    """Everything the handlers use, built by the composition root."""

    client: ApiClient
    runner: Stacks
    writer: StatusSink
    fleet: Fleet
    programs: Mapping[ProviderName, Program]
    classify: Callable[[str], ErrorClass]
    on_proxy_gone: Callable[[ProxyKey], Awaitable[None]]
    spans: Spans
    stack_metrics: StackMetrics
    instances: InstanceCache
    requeue: Requeue
    policy: RetryPolicy
    clock: Clock
    post_event: PostEvent  # the reconciler's Events (event_poster)
    # (uid, failed up's text) -> import id of this Proxy's VM a killed up left unrecorded
    adopt: Callable[[str, str], Awaitable[str | None]] | None = None
    shard: Shard | None = None  # None: this operator owns every Proxy it watches
    squid_image: str = DEFAULT_SQUID_IMAGE  # a kubernetes Proxy's image when it names none
    # The discovery API as proxies reach it (their revocation lists); None: not reachable.
    proxy_discovery_url: str | None = None
    # Why this replica is not the one at work, or None (`standby.py`).
    standby: Gate = never_paused

    @property
    def bell(self) -> Bell:
        """Wake-ups for the Proxies this controller handles (`wakeup.py`)."""
        return Bell(self.client, self.clock)
