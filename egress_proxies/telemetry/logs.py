"""Operator logging: one line per event, keyed by proxy, namespace and stack, text or JSON.

The keys come, first found wins, from `extra=` on the call, from kopf's
per-object loggers (a Proxy's handlers log with its reference), or from an
enclosing `log_context` block. Inside a recording span, `traceID` and
`spanID` are added too. EGRESS_PROXIES_LOG_FORMAT=json selects JSON lines;
the default text format is the previous one with ` key=value` pairs appended,
and newlines escaped so an event never spans two lines.
"""

from __future__ import annotations

import contextlib
import copy
import datetime
import json
import logging
from collections.abc import Iterator, Mapping
from contextvars import ContextVar
from typing import Any, TextIO

from typing_extensions import override

from egress_proxies.model import KIND
from egress_proxies.telemetry.tracing import SPAN_ID_KEY, TRACE_ID_KEY, TraceContextFilter

LOG_FORMAT_ENV = "EGRESS_PROXIES_LOG_FORMAT"
LOG_LEVEL_ENV = "EGRESS_PROXIES_LOG_LEVEL"
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
CONTEXT_KEYS = ("proxy", "namespace", "stack")
FIELD_KEYS = (*CONTEXT_KEYS, TRACE_ID_KEY, SPAN_ID_KEY)

_bound: ContextVar[Mapping[str, str] | None] = ContextVar(
    "egress_proxies_log_context", default=None
)


@contextlib.contextmanager
def log_context(
    *, namespace: str | None = None, proxy: str | None = None, stack: str | None = None
) -> Iterator[None]:
    """Records logged inside the block (in this task or thread) carry these keys."""
    given = {"namespace": namespace, "proxy": proxy, "stack": stack}
    token = _bound.set({**(_bound.get() or {}), **{k: v for k, v in given.items() if v}})
    try:
        yield
    finally:
        _bound.reset(token)


class ContextFilter(logging.Filter):
    """Fills `proxy`, `namespace`, `stack` from kopf's object reference and `log_context`."""

    @override
    def filter(self, record: logging.LogRecord) -> bool:
        for key, value in {**(_bound.get() or {}), **_kopf_keys(record)}.items():
            if not hasattr(record, key):
                setattr(record, key, value)
        return True


def _kopf_keys(record: logging.LogRecord) -> dict[str, str]:
    ref = getattr(record, "k8s_ref", None)
    if not isinstance(ref, Mapping):
        return {}
    keys = {"namespace": ref.get("namespace")}
    if ref.get("kind") == KIND:
        keys["proxy"] = ref.get("name")
    return {key: str(value) for key, value in keys.items() if value}


def record_fields(record: logging.LogRecord) -> dict[str, str]:
    """The context and trace keys a record carries, in a fixed order."""
    values = ((key, getattr(record, key, None)) for key in FIELD_KEYS)
    return {key: str(value) for key, value in values if value is not None and value != ""}


class TextFormatter(logging.Formatter):
    """`<time> <LEVEL> <logger>: <message> key=value ...`, always one line."""

    def __init__(self) -> None:
        super().__init__(TEXT_FORMAT)

    @override
    def format(self, record: logging.LogRecord) -> str:
        plain = copy.copy(record)
        plain.exc_info = plain.exc_text = plain.stack_info = None
        line = super().format(plain)
        pairs = [f"{key}={_quoted(value)}" for key, value in record_fields(record).items()]
        if record.exc_info:
            pairs.append(f"exc={json.dumps(self.formatException(record.exc_info))}")
        return _one_line(" ".join([line, *pairs]))


def _quoted(value: str) -> str:
    if not value or any(c.isspace() or c in '"=' for c in value):
        return json.dumps(value)
    return value


def _one_line(text: str) -> str:
    return text.replace("\r", "\\r").replace("\n", "\\n")


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message, the keys, exception."""

    @override
    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": datetime.datetime.fromtimestamp(record.created, datetime.UTC).isoformat(
                timespec="milliseconds"
            ),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
            **record_fields(record),
        }
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str)


def setup_logging(env: Mapping[str, str], stream: TextIO | None = None) -> logging.Handler:
    """Replace the root logger's handlers with one writing to `stream` (default stderr).

    EGRESS_PROXIES_LOG_FORMAT is `text` (default) or `json`; EGRESS_PROXIES_LOG_LEVEL
    a level name (default INFO). Raises ValueError for any other value.
    """
    formats: dict[str, type[logging.Formatter]] = {"text": TextFormatter, "json": JsonFormatter}
    name = env.get(LOG_FORMAT_ENV, "text").strip().lower() or "text"
    if name not in formats:
        raise ValueError(f"{LOG_FORMAT_ENV} must be 'text' or 'json', not {name!r}")
    handler = logging.StreamHandler(stream)
    handler.setFormatter(formats[name]())
    handler.addFilter(ContextFilter())
    handler.addFilter(TraceContextFilter())
    root = logging.getLogger()
    root.setLevel(env.get(LOG_LEVEL_ENV, "INFO").strip().upper() or "INFO")
    for existing in root.handlers[:]:
        root.removeHandler(existing)
    root.addHandler(handler)
    # The Kubernetes client's HTTP library logs every request at INFO.
    logging.getLogger("httpx2").setLevel(logging.WARNING)
    return handler
