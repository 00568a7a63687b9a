"""Prometheus metrics and OpenTelemetry tracing (seed sections 9-10)."""
