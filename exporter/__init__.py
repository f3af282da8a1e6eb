"""accel-exporter: one Prometheus node exporter for NVIDIA, AMD and Intel oneAPI
accelerators and the CPU, in one vendor-neutral metric vocabulary."""

__version__ = "0.1.0"
