"""Log lines: one per event, proxy/namespace/stack keys, trace ids, text or JSON."""

from __future__ import annotations

import io
import json
import logging
import re
from collections.abc import Iterator

import pytest
from opentelemetry.sdk.trace import TracerProvider

from egress_proxies.telemetry.logs import log_context, setup_logging
from egress_proxies.telemetry.tracing import Spans

pytestmark = pytest.mark.unit

TIME = r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}"


@pytest.fixture(autouse=True)
def restore_root_logger() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


def configure(fmt: str | None = None, level: str | None = None) -> io.StringIO:
    stream = io.StringIO()
    env = {"EGRESS_PROXIES_LOG_FORMAT": fmt} if fmt else {}
    if level:
        env["EGRESS_PROXIES_LOG_LEVEL"] = level
    setup_logging(env, stream)
    return stream


def lines(stream: io.StringIO) -> list[str]:
    return stream.getvalue().splitlines()


def test_text_lines_are_the_plain_format_when_there_is_nothing_to_add() -> None:
    stream = configure()
    logging.getLogger("egress_proxies.x").info("hello %s", "world")
    (line,) = lines(stream)
    assert re.fullmatch(rf"{TIME} INFO egress_proxies.x: hello world", line)


def test_keys_come_from_extra_then_log_context() -> None:
    stream = configure()
    log = logging.getLogger("egress_proxies.x")
    with log_context(namespace="crawl", proxy="p1"):
        log.info("one")
        with log_context(stack="crawl.p1"):
            log.warning("two", extra={"proxy": "other"})
    log.info("three")
    one, two, three = (line.split(": ", 1)[1] for line in lines(stream))
    assert one == "one proxy=p1 namespace=crawl"
    assert two == "two proxy=other namespace=crawl stack=crawl.p1"
    assert three == "three"


def test_kopf_object_loggers_name_the_proxy() -> None:
    stream = configure()
    log = logging.getLogger("kopf.objects")
    ref = {"kind": "Proxy", "namespace": "crawl", "name": "p1", "uid": "u"}
    log.info("Handler succeeded.", extra={"k8s_ref": ref})
    secret = {"kind": "Secret", "namespace": "crawl", "name": "s"}
    log.info("Secret seen.", extra={"k8s_ref": secret})
    proxy, other = (line.split(": ", 1)[1] for line in lines(stream))
    assert proxy == "Handler succeeded. proxy=p1 namespace=crawl"
    assert other == "Secret seen. namespace=crawl"


def test_every_event_is_one_line_even_with_newlines_and_tracebacks() -> None:
    stream = configure()
    log = logging.getLogger("egress_proxies.x")
    try:
        raise ValueError("bad\nvalue")
    except ValueError:
        log.exception("failed:\n%s", "pulumi output\nline 2", extra={"stack": "a b"})
    (line,) = lines(stream)
    message = line.split(": ", 1)[1]
    assert message.startswith('failed:\\npulumi output\\nline 2 stack="a b" exc="Traceback')
    assert message.endswith('ValueError: bad\\nvalue"')


def test_json_lines_carry_every_key_and_trace_ids() -> None:
    stream = configure("JSON")
    spans = Spans(TracerProvider().get_tracer("test"))
    log = logging.getLogger("egress_proxies.x")
    with spans.reconcile("crawl", "p1") as span, log_context(namespace="crawl", proxy="p1"):
        log.info("reconciling", extra={"stack": "crawl.p1"})
    log.debug("hidden")
    try:
        raise KeyError("k")
    except KeyError:
        log.error("no\nkey", exc_info=True)
    first, second = (json.loads(line) for line in lines(stream))
    context = span.get_span_context()
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}\+00:00", first.pop("time"))
    assert first == {
        "level": "INFO",
        "logger": "egress_proxies.x",
        "message": "reconciling",
        "proxy": "p1",
        "namespace": "crawl",
        "stack": "crawl.p1",
        "traceID": f"{context.trace_id:032x}",
        "spanID": f"{context.span_id:016x}",
    }
    assert second["message"] == "no\nkey"
    assert second["exception"].startswith("Traceback") and "KeyError: 'k'" in second["exception"]


def test_level_and_format_come_from_the_environment() -> None:
    stream = configure(level="warning")
    logging.getLogger("egress_proxies.x").info("quiet")
    logging.getLogger("egress_proxies.x").warning("loud")
    assert [line.split(": ", 1)[1] for line in lines(stream)] == ["loud"]
    with pytest.raises(ValueError, match="EGRESS_PROXIES_LOG_FORMAT must be 'text' or 'json'"):
        configure("yaml")


def test_setup_replaces_handlers_instead_of_adding_them() -> None:
    configure()
    stream = configure()
    logging.getLogger("egress_proxies.x").info("once")
    assert len(lines(stream)) == 1
    assert len(logging.getLogger().handlers) == 1
