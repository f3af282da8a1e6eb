"""Pod attribution: which containers the kubelet assigned each device to.

The kubelet's PodResources API (v1, a gRPC service on a unix socket) lists, per
container, the device plugin IDs it allocated: GPU and MIG UUIDs for NVIDIA, PCI
addresses for AMD and Intel. This backend exports no devices of its own; it hands
those assignments to the renderer, which matches them to the devices the vendor
backends found and writes ``accel_device_pod_info``.

Why it behaves as it does:

* A host without Kubernetes has no socket. That is not a fault: discovery says so
  in one log line and the backend stays ``accel_exporter_backend_up 0``. The check
  is one ``stat``, so it is repeated every poll, and a kubelet that starts (or
  restarts, which deletes and recreates the socket) is picked up at the next poll
  rather than after the usual minute.
* A failed ``List`` raises, so the poller marks the backend down and drops its
  pods: stale assignments would name pods that may be gone. The vendor backends
  are untouched, so device metrics keep flowing.
* The gRPC channel is made lazily and reused, and thrown away after any failure: a
  channel to a socket that was recreated would otherwise sit in gRPC's reconnect
  backoff for up to two minutes.
"""

from __future__ import annotations

import logging
import os
import stat
import threading
from typing import TYPE_CHECKING

from exporter.backends.base import Backend, BackendOptions
from exporter.model import BackendUnavailableError, DeviceInfo, PodAssignment, Reading

if TYPE_CHECKING:
    import grpc

    from exporter.kubelet.podresources_pb2_grpc import PodResourcesListerStub

log = logging.getLogger("accel_exporter.kubelet")

# gRPC's core writes its own lines to stderr (e.g. "Got goaway" when the kubelet
# restarts), which would break the exporter's logfmt/JSON log; failures reach the log
# through the poller instead. Set before grpc is first imported, which this module
# does lazily; an operator's own GRPC_VERBOSITY wins.
os.environ.setdefault("GRPC_VERBOSITY", "NONE")

# How long one List (or GetAllocatableResources) may take. The kubelet answers from
# memory in milliseconds; a call that takes longer means the kubelet is in trouble,
# and the backend is better reported down than left to the poll timeout.
RPC_TIMEOUT_SECONDS = 2.0


class KubeletError(Exception):
    """A PodResources call failed; the poller marks the backend down and asks it to
    discover again at the next poll."""


class KubeletBackend(Backend):
    name = "kubelet"
    # Polled by default: on a node without a kubelet it costs one stat per poll and
    # one log line, and on a Kubernetes node pod attribution then needs no flag.
    hardware = True

    def __init__(self, options: BackendOptions, timeout: float = RPC_TIMEOUT_SECONDS) -> None:
        super().__init__(options)
        self.timeout = timeout
        self._channel: grpc.Channel | None = None
        self._stub: PodResourcesListerStub | None = None
        # close() runs on the event loop's thread, the calls on the poll thread.
        self._lock = threading.Lock()

    @property
    def socket_path(self) -> str:
        return str(self.options.kubelet_socket)

    def _check_socket(self) -> None:
        path = self.socket_path
        try:
            st = os.stat(path)
        except FileNotFoundError:
            raise BackendUnavailableError(
                f"kubelet pod-resources socket {path} not found; pod attribution off",
                retry_seconds=0,
            ) from None
        except OSError as e:
            # Typically EACCES: the pod-resources directory is root-only, and the
            # exporter needs it mounted and readable.
            raise BackendUnavailableError(
                f"kubelet pod-resources socket {path}: {e.strerror}; pod attribution off",
                retry_seconds=0,
            ) from None
        if not stat.S_ISSOCK(st.st_mode):
            raise BackendUnavailableError(
                f"kubelet pod-resources socket {path} is not a socket; pod attribution off",
                retry_seconds=0,
            )

    def _lister(self) -> PodResourcesListerStub:
        import grpc

        from exporter.kubelet.podresources_pb2_grpc import PodResourcesListerStub

        with self._lock:
            if self._stub is None:
                self._channel = grpc.insecure_channel(f"unix://{self.socket_path}")
                self._stub = PodResourcesListerStub(self._channel)
            return self._stub

    def _drop_channel(self) -> None:
        with self._lock:
            channel, self._channel, self._stub = self._channel, None, None
        if channel is not None:
            channel.close()

    def _failed(self, e: Exception) -> KubeletError:
        """Forgets the channel and says what failed, in one line for the log. The
        line does not name the call: a dead kubelet fails List, then the next poll's
        GetAllocatableResources, and the poller logs a reason only when it changes."""
        import grpc

        self._drop_channel()
        where = f"kubelet pod-resources at {self.socket_path}"
        if isinstance(e, grpc.RpcError) and isinstance(e, grpc.Call):
            return KubeletError(f"{where}: {e.code().name}: {e.details()}")
        return KubeletError(f"{where}: {type(e).__name__}: {e}")

    def discover(self) -> list[DeviceInfo]:
        """Checks the socket and logs what the kubelet can allocate; no devices.

        ``GetAllocatableResources`` (kubelet 1.21 and newer) says which device
        resources this node advertises, which is what an operator needs to see when
        no device gets a pod; an older kubelet answers UNIMPLEMENTED and is fine.
        """
        self._check_socket()
        import grpc

        from exporter.kubelet import podresources_pb2 as pb

        try:
            resp = self._lister().GetAllocatableResources(
                pb.AllocatableResourcesRequest(), timeout=self.timeout
            )
        except grpc.RpcError as e:
            if isinstance(e, grpc.Call) and e.code() == grpc.StatusCode.UNIMPLEMENTED:
                log.info("kubelet at %s does not serve GetAllocatableResources", self.socket_path)
                return []
            raise self._failed(e) from None
        counts: dict[str, int] = {}
        for dev in resp.devices:
            counts[dev.resource_name] = counts.get(dev.resource_name, 0) + len(dev.device_ids)
        log.info(
            "kubelet pod-resources at %s: allocatable devices %s",
            self.socket_path,
            ", ".join(f"{r}={n}" for r, n in sorted(counts.items())) or "none",
        )
        return []

    def read(self, device: DeviceInfo) -> Reading:
        raise NotImplementedError("the kubelet backend exports no devices of its own")

    def pods(self) -> list[PodAssignment]:
        """One row per (pod, container, device ID) of every device resource.

        Every resource with device IDs is kept, whatever its name (nvidia.com/gpu,
        nvidia.com/mig-1g.10gb, amd.com/gpu, gpu.intel.com/i915, ...): the renderer
        keeps only the IDs that match a device this exporter found, so a new resource
        name needs no change here. CPU and memory assignments carry no device IDs.
        """
        if not os.path.exists(self.socket_path):
            self._drop_channel()
            raise KubeletError(f"kubelet pod-resources socket {self.socket_path} went away")
        from exporter.kubelet import podresources_pb2 as pb

        try:
            resp = self._lister().List(pb.ListPodResourcesRequest(), timeout=self.timeout)
        except Exception as e:
            raise self._failed(e) from None
        out: list[PodAssignment] = []
        for pod in resp.pod_resources:
            for container in pod.containers:
                for dev in container.devices:
                    out.extend(
                        PodAssignment(
                            namespace=pod.namespace,
                            pod=pod.name,
                            container=container.name,
                            resource=dev.resource_name,
                            device_id=device_id,
                        )
                        for device_id in dev.device_ids
                    )
        return out

    def close(self) -> None:
        self._drop_channel()
