"""The kopf operator: handlers around a pure reconcile state machine (seed section 2-4)."""
