"""Kubernetes Events about the operator's objects, aggregated into one series per reason."""

from egress_proxies.events.recorder import EventRecorder, EventSink
from egress_proxies.events.series import SERIES_INTERVAL, Regarding, SeriesBook, event_name

__all__ = [
    "SERIES_INTERVAL",
    "EventRecorder",
    "EventSink",
    "Regarding",
    "SeriesBook",
    "event_name",
]
