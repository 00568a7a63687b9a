"""The kopf operator: handlers around a pure reconcile state machine (docs/operator.md)."""
