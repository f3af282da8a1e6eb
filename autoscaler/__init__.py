"""accel-autoscaler: evaluates YAML remediation rules (PromQL) against accelerator
metrics and decides what to do on a Kubernetes cluster. It may import
``exporter.schema`` (the metric catalogue) and nothing else from the exporter."""

__version__ = "0.1.0"
