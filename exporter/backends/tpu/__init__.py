"""Google TPU: chips from sysfs, telemetry from libtpu's runtime metrics service.

``backend`` is the adapter, ``chips`` reads sysfs, ``runtime`` is the gRPC client of
the service that libtpu serves on the TPU VM (the one ``tpu-info`` reads). The
``tpu_metric_service_pb2*`` modules are generated from ``tpu_metric_service.proto``
by ``make proto`` and committed, so that installing the exporter needs no protobuf
compiler.
"""

from exporter.backends.tpu.backend import TpuBackend

__all__ = ["TpuBackend"]
