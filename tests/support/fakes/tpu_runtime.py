"""A fake libtpu runtime metrics service: a real gRPC server on 127.0.0.1 speaking
``tpu.monitoring.runtime.RuntimeMetricService``, with chips the test changes.

It is served by ``grpc.server`` with the generated servicer and gRPC local server
credentials (what a client with local channel credentials, as ``tpu-info`` and the
backend use, needs), so the backend's client goes through the same channel, framing,
deadlines and status codes as against libtpu; only the answers are scripted.

It fails the ways the real service does:

* **not there** (``stop()``): no workload holds the chips, nothing listens, and the
  client sees UNAVAILABLE;
* **not initialised** (``not_initialised``): the server answers, but with a status
  (UNAVAILABLE or FAILED_PRECONDITION) instead of values, as a runtime that is
  still bringing its chips up;
* **device lost** (``lose(chip)``): the chip's points disappear from every metric
  while the others stay;
* **call timeout** (``delay``): every call sleeps that long before answering, past
  the client's deadline;
* **older libtpu** (``unsupported``): metric names answered NOT_FOUND, and
  ``status_supported=False`` answers GetTpuRuntimeStatus UNIMPLEMENTED.
"""

from __future__ import annotations

import concurrent.futures
import threading
import time
from dataclasses import dataclass, field

import grpc

from exporter.backends.tpu import tpu_metric_service_pb2 as pb
from exporter.backends.tpu import tpu_metric_service_pb2_grpc as pb_grpc

GIB = 1024**3


@dataclass
class FakeChip:
    duty_cycle_percent: float = 0.0
    # one entry per runtime device (TensorCore) of the chip
    hbm_used: list[int] = field(default_factory=lambda: [0])
    hbm_total: list[int] = field(default_factory=lambda: [16 * GIB])
    hbm_bandwidth_percent: list[float] = field(default_factory=lambda: [0.0])
    # core index on the chip -> error message
    core_errors: dict[int, str] = field(default_factory=dict)


def _point(device_id: int, value: float | int) -> pb.Metric:
    attr = pb.Attribute(key="device-id", value=pb.AttrValue(int_attr=device_id))
    if isinstance(value, int):
        return pb.Metric(attribute=attr, gauge=pb.Gauge(as_int=value))
    return pb.Metric(attribute=attr, gauge=pb.Gauge(as_double=value))


class _Servicer(pb_grpc.RuntimeMetricServiceServicer):
    def __init__(self, runtime: FakeTpuRuntime) -> None:
        self.runtime = runtime

    def _enter(self, context: grpc.ServicerContext) -> dict[int, FakeChip]:
        rt = self.runtime
        with rt.lock:
            rt.calls += 1
            delay, failing = rt.delay, rt.not_initialised
            chips = {i: c for i, c in rt.chips.items() if i not in rt.lost}
        if delay:
            time.sleep(delay)  # a runtime too busy to answer in time
        if failing is not None:
            context.abort(failing, "TPU runtime is not initialized")
        return chips

    def GetRuntimeMetric(
        self, request: pb.MetricRequest, context: grpc.ServicerContext
    ) -> pb.MetricResponse:
        chips = self._enter(context)
        name = request.metric_name
        if name in self.runtime.unsupported:
            context.abort(grpc.StatusCode.NOT_FOUND, f"metric {name} not found")
        points: list[pb.Metric] = []
        for i, chip in sorted(chips.items()):
            per_device: list[float] | list[int]
            if name == "tpu.runtime.tensorcore.dutycycle.percent":
                points.append(_point(i, chip.duty_cycle_percent))
                continue
            if name == "tpu.runtime.hbm.memory.usage.bytes":
                per_device = chip.hbm_used
            elif name == "tpu.runtime.hbm.memory.total.bytes":
                per_device = chip.hbm_total
            elif name == "tpu.runtime.hbm.utilization.percent":
                per_device = chip.hbm_bandwidth_percent
            else:
                context.abort(grpc.StatusCode.NOT_FOUND, f"metric {name} not found")
            n = len(per_device)
            points.extend(_point(i * n + k, v) for k, v in enumerate(per_device))
        return pb.MetricResponse(metric=pb.TPUMetric(name=name, description="fake", metrics=points))

    def GetTpuRuntimeStatus(
        self, request: pb.GetTpuRuntimeStatusRequest, context: grpc.ServicerContext
    ) -> pb.GetTpuRuntimeStatusResponse:
        chips = self._enter(context)
        if not self.runtime.status_supported:
            context.abort(grpc.StatusCode.UNIMPLEMENTED, "unknown method GetTpuRuntimeStatus")
        states: dict[int, pb.CurrentCoreStateSummary] = {}
        for i, chip in sorted(chips.items()):
            cores = max(len(chip.hbm_total), 1)
            for k in range(cores):
                core = i * cores + k
                state = pb.CurrentCoreStateSummary(
                    core_id=pb.TpuCoreIdentifier(global_core_id=core, chip_id=i)
                )
                if k in chip.core_errors:
                    state.error_message = chip.core_errors[k]
                states[core] = state
        return pb.GetTpuRuntimeStatusResponse(host_name="fake-tpu-vm", core_states=states)


class FakeTpuRuntime:
    """``start()`` serves on 127.0.0.1 on a free port (``address``); ``stop()`` stops
    it, as a workload that exits takes libtpu's server with it."""

    def __init__(self, chips: dict[int, FakeChip] | None = None) -> None:
        self.lock = threading.Lock()
        self.chips: dict[int, FakeChip] = dict(chips or {})
        self.lost: set[int] = set()
        self.delay = 0.0
        self.not_initialised: grpc.StatusCode | None = None
        self.unsupported: set[str] = set()
        self.status_supported = True
        self.calls = 0
        self.port = 0
        self._server: grpc.Server | None = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> None:
        server = grpc.server(concurrent.futures.ThreadPoolExecutor(4))
        pb_grpc.add_RuntimeMetricServiceServicer_to_server(_Servicer(self), server)
        creds = grpc.local_server_credentials(grpc.LocalConnectionType.LOCAL_TCP)
        # The same port again after a stop: a workload that restarts serves where the
        # last one did.
        self.port = server.add_secure_port(f"127.0.0.1:{self.port}", creds)
        server.start()
        self._server = server

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop(grace=None).wait(5)
            self._server = None

    def lose(self, chip: int) -> None:
        with self.lock:
            self.lost.add(chip)
