"""Tracing in the running operator: the console exporter's spans, and nothing when not asked.

With OTEL_TRACES_EXPORTER=console the operator prints each span as JSON on
its stdout, which the e2e harness writes to the operator log with stderr.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import subprocess
import sys
import textwrap
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from egress_proxies.kube import KubeClient
from egress_proxies.vocabulary import UID_LABEL
from harness.operator import (
    OperatorProcess,
    managed_proxy,
    new_operator,
    proxy_path,
    wait_for_condition,
)
from harness.origins import serve_origin
from tests.conftest import ClusterHandle, wait_for
from tests.gc.test_orphan_gc import stray_pod

pytestmark = pytest.mark.e2e

Span = dict[str, Any]

TRACED_ENV = {
    "OTEL_TRACES_EXPORTER": "console",
    "EGRESS_PROXIES_GC_INTERVAL_SECONDS": "2",
    "EGRESS_PROXIES_GC_MIN_AGE_SECONDS": "1",
}


def without_tracing_env(env: Mapping[str, str]) -> dict[str, str]:
    """`env` without OTEL_* and W3C trace variables, so a test decides whether the operator traces.

    With TRACEPARENT set, importing pulumi installs the pulumi SDK's own
    TracerProvider before the operator's setup runs.
    """
    return {
        name: value
        for name, value in env.items()
        if not name.startswith("OTEL_") and name not in ("TRACEPARENT", "TRACESTATE")
    }


@pytest.fixture
def operator(
    dev_cluster: ClusterHandle, namespace: str, tmp_path: Path
) -> Iterator[OperatorProcess]:
    """The operator printing spans on its stdout (the log), with a fast GC."""
    process = new_operator(dev_cluster.kubeconfig, namespace, tmp_path)
    process.env = {**without_tracing_env(process.env), **TRACED_ENV}
    process.start()
    yield process
    process.stop()


def printed_spans(log: str) -> list[Span]:
    """The console exporter's spans: each a JSON object whose `{` is alone on its line."""
    decoder = json.JSONDecoder()
    return [
        decoder.raw_decode(log, match.start())[0]
        for match in re.finditer(r"^\{$", log, re.MULTILINE)
    ]


def hex_id(value: str) -> str:
    """A console span id (`0x...`) as W3C and the log lines spell it."""
    return value.removeprefix("0x")


async def test_reconcile_sweep_and_discovery_request_print_linked_spans(
    kube: KubeClient, namespace: str, operator: OperatorProcess
) -> None:
    pods = f"/api/v1/namespaces/{namespace}/pods"
    await kube.create(pods, stray_pod("orphan", {UID_LABEL: "no-such-proxy"}))
    async with serve_origin() as origin:
        health = {
            "url": origin.url,
            "expectedStatus": 200,
            "intervalSeconds": 1,
            "timeoutSeconds": 1,
        }
        await kube.create(proxy_path(namespace), managed_proxy("traced", healthCheck=health))
        await wait_for_condition(kube, namespace, "traced", "Provisioned", "True")

    trace_id, parent_id = secrets.token_hex(16), secrets.token_hex(8)
    async with aiohttp.ClientSession() as session:
        async with session.get(f"{operator.discovery_url}/healthz") as response:
            assert response.status == 200
        headers = {
            "Authorization": f"Bearer {operator.discovery_token}",
            "traceparent": f"00-{trace_id}-{parent_id}-01",
        }
        async with session.get(f"{operator.discovery_url}/v1/proxies", headers=headers) as response:
            assert response.status == 200

    async def printed() -> list[Span] | None:
        # A span is printed as it ends, after its children: wait for the parents too.
        spans = printed_spans(operator.log_text())
        ids = {span["context"]["span_id"] for span in spans}
        waited = [span for span in spans if span["name"] in ("stack.up", "provider.delete")]
        done = {"GET /v1/proxies", "stack.up", "provider.delete"} <= {s["name"] for s in spans}
        return spans if done and all(span["parent_id"] in ids for span in waited) else None

    spans = await wait_for(printed, timeout=30, interval=0.25)
    by_id = {span["context"]["span_id"]: span for span in spans}
    assert len(by_id) == len(spans), "span ids are unique"
    for span in spans:
        assert span["resource"]["attributes"]["service.name"] == "egress-proxies"
        parent = by_id.get(span["parent_id"])  # a sweep still running is not printed yet
        if parent is not None:
            assert parent["context"]["trace_id"] == span["context"]["trace_id"], span
    # Health probes are not traced unless asked.
    assert {span["name"] for span in spans} == {
        "reconcile",
        "stack.up",
        "GET /v1/proxies",
        "gc.sweep",
        "provider.list",
        "provider.delete",
    }
    check_reconcile(spans, by_id, namespace)
    check_server_span(spans, trace_id, parent_id)
    sweep = check_sweep(spans, by_id, namespace)

    # Log lines written inside a span carry its ids.
    [deleting] = [line for line in operator.log_text().splitlines() if "GC deleting" in line]
    assert f"traceID={hex_id(sweep['context']['trace_id'])}" in deleting
    assert f"spanID={hex_id(sweep['context']['span_id'])}" in deleting


def check_reconcile(spans: list[Span], by_id: dict[str, Span], namespace: str) -> None:
    """Each reconcile is the root of its own trace; the `up` it ran is its child."""
    [up] = [span for span in spans if span["name"] == "stack.up"]
    stack = f"{namespace}.traced"
    assert up["attributes"] == {"pulumi.stack": stack, "pulumi.operation": "up"}
    reconcile = by_id[up["parent_id"]]
    assert reconcile["name"] == "reconcile" and reconcile["parent_id"] is None
    assert reconcile["context"]["trace_id"] == up["context"]["trace_id"]
    assert reconcile["attributes"] == {
        "k8s.namespace.name": namespace,
        "proxy.name": "traced",
        "proxy.deleting": False,
        "pulumi.stack": stack,
    }
    reconciles = [span for span in spans if span["name"] == "reconcile"]
    assert all(span["parent_id"] is None for span in reconciles)
    assert len({span["context"]["trace_id"] for span in reconciles}) == len(reconciles)


def check_server_span(spans: list[Span], trace_id: str, parent_id: str) -> None:
    """The one discovery request continues the caller's trace; /healthz has no span."""
    [server] = [span for span in spans if span["kind"] == "SpanKind.SERVER"]
    assert server["name"] == "GET /v1/proxies"
    assert hex_id(server["context"]["trace_id"]) == trace_id
    assert hex_id(server["parent_id"]) == parent_id
    assert server["attributes"]["http.route"] == "/v1/proxies"
    assert server["attributes"]["http.response.status_code"] == 200
    assert not [span for span in spans if "healthz" in json.dumps(span)]


def check_sweep(spans: list[Span], by_id: dict[str, Span], namespace: str) -> Span:
    """A GC sweep is a root span and its inventory calls are client spans under it."""
    [delete] = [span for span in spans if span["name"] == "provider.delete"]
    sweep = by_id[delete["parent_id"]]
    assert sweep["name"] == "gc.sweep" and sweep["parent_id"] is None
    assert delete["kind"] == "SpanKind.CLIENT"
    assert delete["attributes"] == {
        "provider.name": "kubernetes",
        "provider.instance_id": f"pods/{namespace}/orphan",
    }
    lists = {span["parent_id"] for span in spans if span["name"] == "provider.list"}
    printed_sweeps = {span["context"]["span_id"] for span in spans if span["name"] == "gc.sweep"}
    assert sweep["context"]["span_id"] in lists
    assert len(lists - printed_sweeps) <= 1, "only the sweep running now is not printed yet"
    assert all(span["parent_id"] is None for span in spans if span["name"] == "gc.sweep")
    return sweep


STARTUP = textwrap.dedent(
    """
    import json, os, sys
    from opentelemetry import trace
    from egress_proxies.operator import main  # the composition root, and pulumi with it
    from egress_proxies.telemetry.logs import setup_logging
    from egress_proxies.telemetry.tracing import setup_tracing, tracer

    setup_logging(os.environ)
    installed = setup_tracing(os.environ)
    with tracer().start_as_current_span("probe") as span:
        recording = span.is_recording()
    print(json.dumps({
        "installed": installed,
        "provider": type(trace.get_tracer_provider()).__name__,
        "recording": recording,
    }))
    """
)


def startup(env: Mapping[str, str]) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-c", STARTUP],
        env=dict(env),
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    result: dict[str, Any] = json.loads(done.stdout.splitlines()[-1])
    return result


def test_with_no_otel_variable_the_operator_installs_no_sdk() -> None:
    untraced = startup(without_tracing_env(os.environ))
    assert untraced == {"installed": False, "provider": "ProxyTracerProvider", "recording": False}
    traced = startup({**without_tracing_env(os.environ), "OTEL_TRACES_EXPORTER": "console"})
    assert traced == {"installed": True, "provider": "TracerProvider", "recording": True}
