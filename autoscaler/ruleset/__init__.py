"""Rule sets: the YAML format (``apiVersion: accel-fleet/v1, kind: RuleSet``), its
typed model, and a loader that reports every problem as ``file:line:col``."""
