"""OpenTelemetry tracing, on only when the standard OTEL_* variables ask for it.

`setup_tracing` installs the SDK when OTEL_TRACES_EXPORTER names an exporter
or an OTLP endpoint is set; OTEL_SDK_DISABLED=true or OTEL_TRACES_EXPORTER=none
keep it off. Off, nothing is installed: spans are the API's no-ops and log
lines carry no trace ids. Exporters are found through the entry points the
OpenTelemetry packages register, so `otlp` works only when an OTLP exporter
package is installed.

Span topology: every reconcile, GC sweep and (opt-in) probe is the root of a
new trace; stack operations and provider calls are its children; discovery
requests are server spans continuing an incoming W3C traceparent.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator, Mapping
from contextlib import AbstractContextManager
from importlib.metadata import entry_points
from typing import Any

from aiohttp import hdrs, web
from aiohttp.typedefs import Handler, Middleware
from opentelemetry import propagate, trace
from opentelemetry.context import Context
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor, SpanExporter
from opentelemetry.trace import SpanKind, Status, StatusCode
from typing_extensions import override

from egress_proxies.catalog import ProxyKey
from egress_proxies.model import ProviderName
from egress_proxies.providers.inventory import InstanceId, Inventory, InventoryListing

logger = logging.getLogger(__name__)

INSTRUMENTATION_NAME = "egress_proxies"
DEFAULT_SERVICE_NAME = "egress-proxies"
EXPORTER_ENTRY_POINTS = "opentelemetry_traces_exporter"
OTLP_ENTRY_POINTS = {"grpc": "otlp_proto_grpc", "http/protobuf": "otlp_proto_http"}
OTLP_PACKAGES = {
    "otlp_proto_grpc": "opentelemetry-exporter-otlp-proto-grpc",
    "otlp_proto_http": "opentelemetry-exporter-otlp-proto-http",
}

ATTR_NAMESPACE = "k8s.namespace.name"
ATTR_PROXY = "proxy.name"
ATTR_DELETING = "proxy.deleting"
ATTR_STACK = "pulumi.stack"
ATTR_OPERATION = "pulumi.operation"
ATTR_PROVIDER = "provider.name"
ATTR_INSTANCE = "provider.instance_id"

UNTRACED_PATHS = frozenset({"/healthz"})
TRACE_ID_KEY = "traceID"
SPAN_ID_KEY = "spanID"


def requested_exporters(env: Mapping[str, str]) -> list[str]:
    """The exporter names the environment asks for; empty means tracing stays off."""
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return []
    names = [name.strip().lower() for name in env.get("OTEL_TRACES_EXPORTER", "").split(",")]
    names = [name for name in names if name]
    if "none" in names:
        return []
    if names:
        return names
    endpoint = env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or env.get(
        "OTEL_EXPORTER_OTLP_ENDPOINT"
    )
    return ["otlp"] if endpoint else []


def setup_tracing(env: Mapping[str, str]) -> bool:
    """Install the SDK's global TracerProvider if `env` asks for tracing; True when installed.

    `env` decides whether and where to export; the SDK components read their own
    settings (OTLP endpoint and headers, sampler, resource) from the process
    environment, as the OpenTelemetry specification defines.
    """
    names = requested_exporters(env)
    exporters = [(name, exporter) for name in names if (exporter := _exporter(name, env))]
    if not exporters:
        if names:
            logger.warning("tracing stays off: no requested exporter is available")
        return False
    provider = TracerProvider(resource=_resource())
    for name, exporter in exporters:
        # Console output is for local development: print each span as it ends.
        processor = (
            SimpleSpanProcessor(exporter) if name == "console" else BatchSpanProcessor(exporter)
        )
        provider.add_span_processor(processor)
    trace.set_tracer_provider(provider)
    if trace.get_tracer_provider() is not provider:
        logger.warning(
            "tracing stays off: another TracerProvider was installed first%s",
            " (with TRACEPARENT set, importing pulumi installs its own: unset it)"
            if env.get("TRACEPARENT")
            else "",
        )
        provider.shutdown()
        return False
    logger.info("tracing on: exporting spans to %s", ", ".join(name for name, _ in exporters))
    return True


def _exporter(name: str, env: Mapping[str, str]) -> SpanExporter | None:
    entry_point = name
    if name == "otlp":
        protocol = (
            env.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
            or env.get("OTEL_EXPORTER_OTLP_PROTOCOL")
            or "grpc"
        )
        if protocol not in OTLP_ENTRY_POINTS:
            logger.warning("tracing: OTLP protocol %r is not supported; not exporting", protocol)
            return None
        entry_point = OTLP_ENTRY_POINTS[protocol]
    found = entry_points(group=EXPORTER_ENTRY_POINTS, name=entry_point)
    if not found:
        package = OTLP_PACKAGES.get(entry_point, f"a package providing {entry_point!r}")
        logger.warning("tracing: the %s exporter needs %s, which is not installed", name, package)
        return None
    exporter: SpanExporter = next(iter(found)).load()()
    return exporter


def _resource() -> Resource:
    resource = Resource.create()
    if str(resource.attributes.get(SERVICE_NAME, "")).startswith("unknown_service"):
        resource = resource.merge(Resource({SERVICE_NAME: DEFAULT_SERVICE_NAME}))
    return resource


def tracer() -> trace.Tracer:
    """The operator's tracer from the global provider (a no-op until setup_tracing installs one)."""
    return trace.get_tracer(INSTRUMENTATION_NAME)


class Spans:
    """The operator's spans; `trace_probes` opts in to one span per health probe."""

    def __init__(self, tracer: trace.Tracer | None = None, *, trace_probes: bool = False) -> None:
        self._tracer = tracer
        self._trace_probes = trace_probes

    def __repr__(self) -> str:
        return f"<Spans [probes traced: {self._trace_probes}]>"

    @property
    def tracer(self) -> trace.Tracer:
        """The tracer given, else the global one."""
        return self._tracer or tracer()

    def reconcile(
        self, namespace: str, name: str, *, stack: str | None = None, deleting: bool = False
    ) -> AbstractContextManager[trace.Span]:
        """The root span of one reconcile (or deletion) of a Proxy: always a new trace."""
        attributes: dict[str, Any] = {
            ATTR_NAMESPACE: namespace,
            ATTR_PROXY: name,
            ATTR_DELETING: deleting,
        }
        if stack is not None:
            attributes[ATTR_STACK] = stack
        return self.tracer.start_as_current_span("reconcile", Context(), attributes=attributes)

    def stack_operation(self, op: str, stack: str) -> AbstractContextManager[trace.Span]:
        """A child span `stack.<op>` (up, destroy) of the current span."""
        return self.tracer.start_as_current_span(
            f"stack.{op}", attributes={ATTR_STACK: stack, ATTR_OPERATION: op}
        )

    def provider_call(self, provider: str, op: str) -> AbstractContextManager[trace.Span]:
        """A client span `provider.<op>` (list, delete) under the current span."""
        return self.tracer.start_as_current_span(
            f"provider.{op}", kind=SpanKind.CLIENT, attributes={ATTR_PROVIDER: provider}
        )

    def gc_sweep(self) -> AbstractContextManager[trace.Span]:
        """The root span of one GC sweep."""
        return self.tracer.start_as_current_span("gc.sweep", Context())

    def probe(self, key: ProxyKey) -> AbstractContextManager[trace.Span]:
        """The root span of one health probe, or a no-op unless probes are traced."""
        if not self._trace_probes:
            return contextlib.nullcontext(trace.INVALID_SPAN)
        namespace, _, name = key.partition("/")
        return self.tracer.start_as_current_span(
            "health.probe", Context(), attributes={ATTR_NAMESPACE: namespace, ATTR_PROXY: name}
        )

    def server_middlewares(self) -> list[Middleware]:
        """The discovery app's middlewares: the server span's, or none while no tracer can
        record (no tracer given, no SDK installed by `setup_tracing`, which must come first).

        Without an SDK every span is a no-op that nobody sees, so the request skips it.
        """
        provider = trace.get_tracer_provider()
        no_op = isinstance(provider, trace.ProxyTracerProvider | trace.NoOpTracerProvider)
        return [] if self._tracer is None and no_op else [self.server_middleware()]

    def server_middleware(self) -> Middleware:
        """aiohttp middleware: one server span per request (not /healthz), continuing traceparent.

        Put it first in the application's middlewares so the span covers the
        others (authentication, error bodies). 5xx responses mark the span as an error.
        """

        @web.middleware
        async def trace_requests(request: web.Request, handler: Handler) -> web.StreamResponse:
            if request.path in UNTRACED_PATHS:
                return await handler(request)
            with self._server_span(request) as span:
                try:
                    response = await handler(request)
                except web.HTTPException as error:
                    _record_status(span, error.status)
                    raise
                except Exception as error:
                    span.record_exception(error)
                    span.set_status(Status(StatusCode.ERROR, type(error).__name__))
                    raise
                _record_status(span, response.status)
                return response

        return trace_requests

    @contextlib.contextmanager
    def _server_span(self, request: web.Request) -> Iterator[trace.Span]:
        route = _route_template(request)
        attributes = {"http.request.method": request.method, "url.path": request.path}
        if route is not None:
            attributes["http.route"] = route
        with self.tracer.start_as_current_span(
            f"{request.method} {route}" if route else request.method,
            propagate.extract(request.headers),
            kind=SpanKind.SERVER,
            attributes=attributes,
            record_exception=False,
            set_status_on_exception=False,
        ) as span:
            yield span


def _route_template(request: web.Request) -> str | None:
    """The matched route's path template; None for aiohttp's 404/405 and for routes
    answering any method, which an application adds as its own 404/405 fallbacks."""
    route = request.match_info.route
    resource = route.resource
    if resource is None or route.method == hdrs.METH_ANY:
        return None
    return resource.canonical


def _record_status(span: trace.Span, status: int) -> None:
    span.set_attribute("http.response.status_code", status)
    if status >= 500:
        span.set_status(Status(StatusCode.ERROR))


class TracedInventory:
    """An Inventory whose calls are `provider.list` / `provider.delete` client spans."""

    def __init__(self, inventory: Inventory, spans: Spans) -> None:
        self._inventory = inventory
        self._spans = spans

    def __repr__(self) -> str:
        return f"<TracedInventory {self._inventory!r}>"

    @property
    def provider(self) -> ProviderName:
        """The wrapped inventory's provider."""
        return self._inventory.provider

    async def list_tagged(self) -> InventoryListing:
        """List inside a `provider.list` span."""
        with self._spans.provider_call(str(self.provider), "list") as span:
            listing = await self._inventory.list_tagged()
            span.set_attribute("provider.instances", len(listing.instances))
            return listing

    async def delete(self, instance_id: InstanceId) -> None:
        """Delete inside a `provider.delete` span."""
        with self._spans.provider_call(str(self.provider), "delete") as span:
            span.set_attribute(ATTR_INSTANCE, instance_id)
            await self._inventory.delete(instance_id)


class TraceContextFilter(logging.Filter):
    """Adds `traceID` and `spanID` to records logged inside a recording span; never drops one."""

    @override
    def filter(self, record: logging.LogRecord) -> bool:
        span = trace.get_current_span()
        context = span.get_span_context()
        if span.is_recording() and context.is_valid:
            setattr(record, TRACE_ID_KEY, trace.format_trace_id(context.trace_id))
            setattr(record, SPAN_ID_KEY, trace.format_span_id(context.span_id))
        return True
