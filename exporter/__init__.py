"""accel-exporter: one Prometheus node exporter for NVIDIA, AMD, Intel oneAPI and
Gaudi, Huawei Ascend and Google TPU accelerators and the CPU, in one vendor-neutral
metric vocabulary."""

__version__ = "0.1.0"
