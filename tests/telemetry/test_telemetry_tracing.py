"""Tracing: off unless OTEL_* asks, span names and links, the discovery middleware, log ids.

`setup_tracing` changes process-global state, so it is exercised in
subprocesses; span shapes are checked in-process on a private SDK provider
with an in-memory exporter.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import NonRecordingSpan, SpanContext, SpanKind, StatusCode, TraceFlags

from egress_proxies.catalog import proxy_key
from egress_proxies.catalog.fleet import Fleet
from egress_proxies.discovery import create_app
from egress_proxies.leases import MemoryLeaseStore
from egress_proxies.model import ProviderName
from egress_proxies.providers.inventory import InstanceId, InventoryListing
from egress_proxies.telemetry.tracing import (
    Spans,
    TraceContextFilter,
    TracedInventory,
    requested_exporters,
)

pytestmark = pytest.mark.unit

INCOMING_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
INCOMING_SPAN = "00f067aa0ba902b7"


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({}, []),
        ({"OTEL_TRACES_EXPORTER": "console"}, ["console"]),
        ({"OTEL_TRACES_EXPORTER": " OTLP , console "}, ["otlp", "console"]),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4317"}, ["otlp"]),
        ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://collector:4317"}, ["otlp"]),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4317", "OTEL_TRACES_EXPORTER": "none"}, []),
        ({"OTEL_TRACES_EXPORTER": "console", "OTEL_SDK_DISABLED": "TRUE"}, []),
        ({"OTEL_TRACES_EXPORTER": "console", "OTEL_SDK_DISABLED": "false"}, ["console"]),
    ],
)
def test_requested_exporters(env: dict[str, str], expected: list[str]) -> None:
    assert requested_exporters(env) == expected


SCRIPT = textwrap.dedent(
    """
    import logging, os, sys
    from opentelemetry import trace
    from egress_proxies.telemetry.tracing import Spans, TraceContextFilter, setup_tracing

    class Ids(logging.Formatter):
        def format(self, record):
            ids = [getattr(record, key, "-") for key in ("traceID", "spanID")]
            return "{} {} traceID={} spanID={}".format(record.levelname, record.getMessage(), *ids)

    handler = logging.StreamHandler(sys.stderr)
    handler.addFilter(TraceContextFilter())
    handler.setFormatter(Ids())
    logging.basicConfig(level=logging.INFO, handlers=[handler])
    installed = setup_tracing(os.environ)
    spans = Spans()
    with spans.reconcile("crawl", "p1", stack="crawl.p1") as root:
        recording = root.is_recording()
        with spans.stack_operation("up", "crawl.p1"):
            logging.getLogger("test").info("inside")
    with spans.gc_sweep():
        pass
    middlewares = len(spans.server_middlewares())
    print("RESULT", installed, type(trace.get_tracer_provider()).__name__, recording, middlewares)
    """
)


def run_script(**env: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "TRACEPARENT"))}
    return subprocess.run(
        [sys.executable, "-c", SCRIPT],
        env={**clean, **env},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )


def result_line(output: str) -> list[str]:
    line = next(line for line in output.splitlines() if line.startswith("RESULT "))
    return line.split()[1:]


def console_spans(output: str) -> list[dict[str, Any]]:
    decoder, spans, text = json.JSONDecoder(), [], output
    position = text.find("{")
    while position != -1:
        span, end = decoder.raw_decode(text, position)
        spans.append(span)
        position = text.find("{", end)
    return spans


def test_with_nothing_set_no_sdk_is_installed_no_request_is_traced_and_logs_have_no_ids() -> None:
    done = run_script()
    assert result_line(done.stdout) == ["False", "ProxyTracerProvider", "False", "0"]
    assert "INFO inside traceID=- spanID=-" in done.stderr


@pytest.mark.parametrize(
    "env",
    [
        {"OTEL_SDK_DISABLED": "true", "OTEL_TRACES_EXPORTER": "console"},
        {"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9"},
    ],
)
def test_disabling_variables_force_tracing_off(env: dict[str, str]) -> None:
    assert result_line(run_script(**env).stdout) == ["False", "ProxyTracerProvider", "False", "0"]


def test_a_missing_exporter_package_is_a_clear_warning_and_tracing_stays_off() -> None:
    done = run_script(OTEL_TRACES_EXPORTER="otlp", OTEL_EXPORTER_OTLP_PROTOCOL="http/protobuf")
    assert result_line(done.stdout) == ["False", "ProxyTracerProvider", "False", "0"]
    assert (
        "WARNING tracing: the otlp exporter needs opentelemetry-exporter-otlp-proto-http, "
        "which is not installed"
    ) in done.stderr
    assert "WARNING tracing stays off: no requested exporter is available" in done.stderr


def test_an_otlp_endpoint_alone_turns_tracing_on() -> None:
    done = run_script(OTEL_EXPORTER_OTLP_ENDPOINT="http://127.0.0.1:9")
    assert result_line(done.stdout) == ["True", "TracerProvider", "True", "1"]


def test_a_traceparent_in_the_environment_is_named_when_pulumi_took_the_provider() -> None:
    # pulumi reads TRACEPARENT when imported and installs its own SDK provider.
    script = "import pulumi\n" + SCRIPT
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "TRACEPARENT"))}
    done = subprocess.run(
        [sys.executable, "-c", script],
        env={
            **clean,
            "OTEL_TRACES_EXPORTER": "console",
            "TRACEPARENT": f"00-{INCOMING_TRACE}-{INCOMING_SPAN}-01",
        },
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert result_line(done.stdout)[:2] == ["False", "TracerProvider"]
    assert (
        "WARNING tracing stays off: another TracerProvider was installed first "
        "(with TRACEPARENT set, importing pulumi installs its own: unset it)"
    ) in done.stderr


def test_console_prints_the_reconcile_tree_and_logs_carry_its_ids() -> None:
    done = run_script(OTEL_TRACES_EXPORTER="console", OTEL_SERVICE_NAME="")
    assert result_line(done.stdout) == ["True", "TracerProvider", "True", "1"]
    printed = {span["name"]: span for span in console_spans(done.stdout)}
    assert set(printed) == {"reconcile", "stack.up", "gc.sweep"}
    root, child, sweep = printed["reconcile"], printed["stack.up"], printed["gc.sweep"]
    assert root["parent_id"] is None and sweep["parent_id"] is None
    assert child["parent_id"] == root["context"]["span_id"]
    assert child["context"]["trace_id"] == root["context"]["trace_id"]
    assert sweep["context"]["trace_id"] != root["context"]["trace_id"]
    assert root["attributes"] == {
        "k8s.namespace.name": "crawl",
        "proxy.name": "p1",
        "proxy.deleting": False,
        "pulumi.stack": "crawl.p1",
    }
    assert child["attributes"] == {"pulumi.stack": "crawl.p1", "pulumi.operation": "up"}
    assert root["resource"]["attributes"]["service.name"] == "egress-proxies"
    trace_id = root["context"]["trace_id"].removeprefix("0x")
    span_id = child["context"]["span_id"].removeprefix("0x")
    assert f"INFO inside traceID={trace_id} spanID={span_id}" in done.stderr


@pytest.fixture
def exporter() -> InMemorySpanExporter:
    return InMemorySpanExporter()


@pytest.fixture
def spans(exporter: InMemorySpanExporter) -> Iterator[Spans]:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield Spans(provider.get_tracer("test"), trace_probes=True)
    provider.shutdown()


def finished(exporter: InMemorySpanExporter) -> dict[str, ReadableSpan]:
    return {span.name: span for span in exporter.get_finished_spans()}


def test_a_reconcile_starts_a_new_trace_even_inside_another_span(
    spans: Spans, exporter: InMemorySpanExporter
) -> None:
    with (
        spans.gc_sweep(),
        spans.reconcile("crawl", "p1", deleting=True),
        spans.stack_operation("destroy", "crawl.p1"),
    ):
        pass
    done = finished(exporter)
    sweep, root, child = done["gc.sweep"], done["reconcile"], done["stack.destroy"]
    assert root.parent is None
    assert root.context is not None and sweep.context is not None and child.context is not None
    assert root.context.trace_id != sweep.context.trace_id
    assert child.parent is not None and child.parent.span_id == root.context.span_id
    assert root.attributes is not None and root.attributes["proxy.deleting"] is True
    assert "pulumi.stack" not in root.attributes


def test_probe_spans_only_when_asked(spans: Spans, exporter: InMemorySpanExporter) -> None:
    with spans.probe(proxy_key("crawl", "p1")):
        pass
    quiet = Spans(spans.tracer)
    with quiet.probe(proxy_key("crawl", "p2")) as span:
        assert not span.is_recording()
    probes = [span for span in exporter.get_finished_spans() if span.name == "health.probe"]
    assert len(probes) == 1
    assert probes[0].parent is None
    assert probes[0].attributes == {"k8s.namespace.name": "crawl", "proxy.name": "p1"}


class Inventory:
    """A kubernetes inventory with nothing in it."""

    @property
    def provider(self) -> ProviderName:
        return ProviderName.KUBERNETES

    async def list_tagged(self) -> InventoryListing:
        return InventoryListing(ProviderName.KUBERNETES, ())

    async def delete(self, instance_id: InstanceId) -> None:
        return None


async def test_inventory_calls_are_client_spans_under_the_sweep(
    spans: Spans, exporter: InMemorySpanExporter
) -> None:
    inventory = TracedInventory(Inventory(), spans)
    with spans.gc_sweep():
        await inventory.list_tagged()
        await inventory.delete(InstanceId("pods/crawl/x"))
    done = finished(exporter)
    sweep = done["gc.sweep"]
    assert sweep.context is not None
    for name in ("provider.list", "provider.delete"):
        span = done[name]
        assert span.kind is SpanKind.CLIENT
        assert span.parent is not None and span.parent.span_id == sweep.context.span_id
        assert span.attributes is not None and span.attributes["provider.name"] == "kubernetes"
    assert done["provider.delete"].attributes == {
        "provider.name": "kubernetes",
        "provider.instance_id": "pods/crawl/x",
    }


async def discovery_client(spans: Spans) -> TestClient[web.Request, web.Application]:
    async def ok(request: web.Request) -> web.Response:
        return web.json_response({"ok": True}, status=201)

    async def denied(request: web.Request) -> web.Response:
        raise web.HTTPUnauthorized()

    async def broken(request: web.Request) -> web.Response:
        raise RuntimeError("bug")

    app = web.Application(middlewares=[spans.server_middleware()])
    app.router.add_get("/healthz", ok)
    app.router.add_post("/v1/leases", ok)
    app.router.add_delete("/v1/leases/{lease_id}", denied)
    app.router.add_get("/v1/proxies", broken)
    client = TestClient(TestServer(app))
    await client.start_server()
    return client


async def test_discovery_requests_are_server_spans_continuing_the_callers_trace(
    spans: Spans, exporter: InMemorySpanExporter
) -> None:
    client = await discovery_client(spans)
    traceparent = f"00-{INCOMING_TRACE}-{INCOMING_SPAN}-01"
    try:
        assert (await client.get("/healthz")).status == 201
        assert (await client.post("/v1/leases", headers={"traceparent": traceparent})).status == 201
        assert (await client.delete("/v1/leases/abc")).status == 401
        assert (await client.get("/v1/proxies")).status == 500
        assert (await client.get("/nowhere")).status == 404
    finally:
        await client.close()
    done = finished(exporter)
    assert set(done) == {
        "POST /v1/leases",
        "DELETE /v1/leases/{lease_id}",
        "GET /v1/proxies",
        "GET",
    }
    lease = done["POST /v1/leases"]
    assert lease.kind is SpanKind.SERVER
    assert lease.context is not None and f"{lease.context.trace_id:032x}" == INCOMING_TRACE
    assert lease.parent is not None and f"{lease.parent.span_id:016x}" == INCOMING_SPAN
    assert lease.attributes is not None
    assert lease.attributes["http.route"] == "/v1/leases"
    assert lease.attributes["http.response.status_code"] == 201
    release = done["DELETE /v1/leases/{lease_id}"]
    assert release.parent is None
    assert release.attributes is not None
    assert release.attributes["http.response.status_code"] == 401
    assert release.status.status_code is StatusCode.UNSET
    failed = done["GET /v1/proxies"]
    assert failed.status.status_code is StatusCode.ERROR
    assert [event.name for event in failed.events] == ["exception"]
    assert done["GET"].attributes is not None
    assert done["GET"].attributes["http.response.status_code"] == 404


async def test_the_discovery_apps_own_404_and_405_name_no_route(
    spans: Spans, exporter: InMemorySpanExporter
) -> None:
    token = "a-token-long-enough-0123"
    app = create_app(
        Fleet(),
        MemoryLeaseStore(),
        lambda: frozenset({token}),
        middlewares=spans.server_middlewares(),
    )
    headers = {"Authorization": f"Bearer {token}"}
    async with TestClient(TestServer(app)) as client:
        assert (await client.put("/v1/leases", headers=headers)).status == 405
        assert (await client.get("/nowhere", headers=headers)).status == 404
        assert (await client.post("/v1/leases", headers=headers, data=b"{")).status == 415
    done = finished(exporter)
    assert set(done) == {"PUT", "GET", "POST /v1/leases"}
    assert done["PUT"].attributes is not None and "http.route" not in done["PUT"].attributes
    assert done["PUT"].attributes["http.response.status_code"] == 405
    assert done["GET"].attributes is not None
    assert done["GET"].attributes["http.response.status_code"] == 404
    posted = done["POST /v1/leases"].attributes
    assert posted is not None and posted["http.route"] == "/v1/leases"
    assert posted["http.response.status_code"] == 415


def log_record() -> logging.LogRecord:
    record = logging.LogRecord("test", logging.INFO, __file__, 1, "message", None, None)
    TraceContextFilter().filter(record)
    return record


def test_log_records_carry_trace_ids_only_inside_recording_spans(spans: Spans) -> None:
    assert not hasattr(log_record(), "traceID")
    with spans.reconcile("crawl", "p1") as span:
        record = log_record()
    context = span.get_span_context()
    assert record.__dict__["traceID"] == f"{context.trace_id:032x}"
    assert record.__dict__["spanID"] == f"{context.span_id:016x}"
    remote = SpanContext(
        int(INCOMING_TRACE, 16), int(INCOMING_SPAN, 16), True, TraceFlags(TraceFlags.SAMPLED)
    )
    with trace.use_span(NonRecordingSpan(remote)):
        assert not hasattr(log_record(), "traceID")
