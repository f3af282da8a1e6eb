"""The client of libtpu's runtime metrics service: one snapshot of every device per poll.

Why it is built this way:

* libtpu serves ``tpu.monitoring.runtime.RuntimeMetricService`` on the TPU VM (port
  8431 by default) from inside the process of the framework that holds the chips. With
  no workload there is no server, and a call answers UNAVAILABLE: that is the normal
  state of an idle TPU VM, not a fault, so it is a ``RuntimeDown`` with the reason,
  which the backend turns into identity-only devices.
* The channel uses gRPC local credentials over TCP, as ``tpu-info`` does, so it speaks
  to libtpu's server as Google's own client does; local credentials accept only a
  loopback address, which is where libtpu listens.
* Every call has a deadline. A server that does not answer in time (a runtime busy
  compiling, or wedged) is a ``RuntimeDown`` for this poll; the remaining calls of
  the poll are not made, so one poll costs at most one deadline on a dead runtime.
* The channel is dropped after a failure. gRPC's reconnect backoff grows to two
  minutes, and a workload that starts would otherwise stay unseen that long; a new
  channel costs one loopback connect per poll while the runtime is away.
* A metric the runtime does not know (an older libtpu without HBM bandwidth, or a
  runtime that answers it with an error status other than UNAVAILABLE or a deadline)
  is left out with its reason, not a failure of the other metrics.
* Device ids: each data point's ``attribute.value.int_attr`` is the device id, as
  ``tpu-info`` reads it; duty cycle is one point per chip, HBM one point per device
  (TensorCore), and a chip with two devices holds ids ``2c`` and ``2c+1``.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import grpc

    from exporter.backends.tpu.tpu_metric_service_pb2_grpc import RuntimeMetricServiceStub

# gRPC's core writes its own lines to stderr, which would break the exporter's log
# format; failures reach the log through the backend. An operator's own setting wins.
os.environ.setdefault("GRPC_VERBOSITY", "NONE")

DUTY_CYCLE = "tpu.runtime.tensorcore.dutycycle.percent"
HBM_USED = "tpu.runtime.hbm.memory.usage.bytes"
HBM_TOTAL = "tpu.runtime.hbm.memory.total.bytes"
HBM_BANDWIDTH = "tpu.runtime.hbm.utilization.percent"
# In the order fetched: duty cycle first, since it names the chips.
METRICS = (DUTY_CYCLE, HBM_USED, HBM_TOTAL, HBM_BANDWIDTH)


class RuntimeDown(Exception):
    """The runtime metrics service did not answer (no workload, not initialised, or
    past the deadline); the message says which, for the log and the missing reasons."""


@dataclass
class RuntimeSnapshot:
    """One poll of the runtime: metric name -> device id -> value; why a metric is
    absent; and each core's error message (global core id -> (chip id, message))."""

    values: dict[str, dict[int, float]] = field(default_factory=dict)
    missing: dict[str, str] = field(default_factory=dict)
    core_errors: dict[int, tuple[int, str]] = field(default_factory=dict)

    def chips(self) -> list[int]:
        """The chip ids the runtime reports, from the per-chip duty cycle."""
        return sorted(self.values.get(DUTY_CYCLE, {}))


def _status(e: Exception) -> tuple[str, str]:
    import grpc

    if isinstance(e, grpc.RpcError) and isinstance(e, grpc.Call):
        return e.code().name, str(e.details() or "")
    return type(e).__name__, str(e)


class RuntimeClient:
    """A lazily made channel to ``address`` and the calls the backend makes."""

    def __init__(self, address: str, timeout: float) -> None:
        self.address = address
        self.timeout = timeout
        self._channel: grpc.Channel | None = None
        self._stub: RuntimeMetricServiceStub | None = None
        # close() may run on another thread than the poll.
        self._lock = threading.Lock()

    def _service(self) -> RuntimeMetricServiceStub:
        import grpc

        from exporter.backends.tpu.tpu_metric_service_pb2_grpc import RuntimeMetricServiceStub

        with self._lock:
            if self._stub is None:
                creds = grpc.local_channel_credentials(grpc.LocalConnectionType.LOCAL_TCP)
                self._channel = grpc.secure_channel(self.address, creds)
                self._stub = RuntimeMetricServiceStub(self._channel)
            return self._stub

    def close(self) -> None:
        with self._lock:
            channel, self._channel, self._stub = self._channel, None, None
        if channel is not None:
            channel.close()

    def _down(self, e: Exception) -> RuntimeDown:
        self.close()
        code, details = _status(e)
        where = f"libtpu runtime metrics service at {self.address}"
        if code == "UNAVAILABLE":
            return RuntimeDown(
                f"{where}: UNAVAILABLE (libtpu serves it only while a workload holds the chips): "
                f"{details}"
            )
        if code == "DEADLINE_EXCEEDED":
            return RuntimeDown(f"{where}: no answer within {self.timeout:g}s")
        return RuntimeDown(f"{where}: {code}: {details}")

    def metric(self, name: str) -> dict[int, float]:
        """Device id -> value of one metric. ``RuntimeDown`` when the service is
        away, initialising or past its deadline; any other RPC error is raised."""
        import grpc

        from exporter.backends.tpu import tpu_metric_service_pb2 as pb

        try:
            resp = self._service().GetRuntimeMetric(
                pb.MetricRequest(metric_name=name), timeout=self.timeout
            )
        except grpc.RpcError as e:
            code, _ = _status(e)
            if code in ("UNAVAILABLE", "DEADLINE_EXCEEDED", "FAILED_PRECONDITION"):
                raise self._down(e) from None
            raise
        out: dict[int, float] = {}
        for point in resp.metric.metrics:
            if point.attribute.value.WhichOneof("attr") != "int_attr":
                continue
            kind = point.WhichOneof("measure")
            if kind == "gauge":
                number = point.gauge.WhichOneof("value")
                if number == "as_double":
                    out[point.attribute.value.int_attr] = point.gauge.as_double
                elif number == "as_int":
                    out[point.attribute.value.int_attr] = float(point.gauge.as_int)
            elif kind == "counter":
                number = point.counter.WhichOneof("value")
                if number == "as_double":
                    out[point.attribute.value.int_attr] = point.counter.as_double
                elif number == "as_int":
                    out[point.attribute.value.int_attr] = float(point.counter.as_int)
        return out

    def core_errors(self) -> dict[int, tuple[int, str]]:
        """Global core id -> (chip id, error message) of every core the runtime
        reports an error for; an older libtpu without the call answers UNIMPLEMENTED,
        which is an empty answer."""
        import grpc

        from exporter.backends.tpu import tpu_metric_service_pb2 as pb

        try:
            resp = self._service().GetTpuRuntimeStatus(
                pb.GetTpuRuntimeStatusRequest(include_hlo_info=False), timeout=self.timeout
            )
        except grpc.RpcError as e:
            code, _ = _status(e)
            if code == "UNIMPLEMENTED":
                return {}
            if code in ("UNAVAILABLE", "DEADLINE_EXCEEDED", "FAILED_PRECONDITION"):
                raise self._down(e) from None
            raise
        return {
            core: (state.core_id.chip_id, state.error_message)
            for core, state in resp.core_states.items()
            if state.HasField("error_message") and state.error_message
        }

    def snapshot(self) -> RuntimeSnapshot:
        """Every metric the backend reads, and the cores' errors. ``RuntimeDown``
        when the service is away; the duty cycle (which names the chips) is
        required, the rest are left out with a reason when the runtime refuses them."""
        import grpc

        snap = RuntimeSnapshot()
        for name in METRICS:
            try:
                snap.values[name] = self.metric(name)
            except grpc.RpcError as e:
                if name == DUTY_CYCLE:
                    raise self._down(e) from None
                code, details = _status(e)
                snap.missing[name] = f"libtpu answered {name} with {code}: {details}"
        try:
            snap.core_errors = self.core_errors()
        except grpc.RpcError as e:
            code, details = _status(e)
            snap.missing["status"] = f"GetTpuRuntimeStatus: {code}: {details}"
        return snap
