"""Prometheus metrics and OpenTelemetry tracing (docs/operations.md)."""
