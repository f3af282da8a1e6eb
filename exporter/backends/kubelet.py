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
* Devices that Dynamic Resource Allocation gave a container (``dynamic_resources``,
  with driver, pool and device since kubelet 1.31) are rows too, with the claim's
  name, the driver as the resource and, as the device ID, the best identity the
  node offers (``exporter.dra``). With ``--dra.resource-slices`` that comes from the
  node's ResourceSlices, listed through the ``kubernetes`` client at most once a
  minute (sooner when a device is not in them yet); a failed list is logged once and
  leaves the previous answer in place, since the kubelet's answer is still good.
* What the kubelet sends is bounded before it is used: claims per container and
  devices per claim are cut at the API server's own limits, and a name that is
  empty or longer than any valid one drops that device, not the poll.
* **An answer may be up to ``MAX_ANSWER_BYTES`` (64 MiB), not gRPC's default of
  4 MiB.** A node's DRA claims make the ``List`` answer large: a container at the
  caps above holds 4,096 devices, each with its driver, pool, device and CDI names
  (about 150 bytes when they are short), some 600 KiB; a few such pods pass 4 MiB,
  and past it gRPC refuses the whole answer (``RESOURCE_EXHAUSTED``), which took
  every pod's attribution with it (issue 27). 64 MiB holds 110 pods (the kubelet's
  default ``maxPods``) each with one such container, and bounds what one poll may
  hold in memory; the kubelet's own clients ask for 16 MiB.
* **An answer over that drops only what does not fit.** When ``List`` is refused
  for its size, the pods are read one by one with ``Get`` (PodResources v1; on by
  default with the DRA part of ``List``, from kubelet 1.34), by the names the last
  answer that fit gave: a pod whose own answer is over the limit is dropped, and
  the pods that ended are skipped. What was dropped is in ``missing`` (the
  exporter's missing-field bookkeeping, under ``pods``) and in one warning per
  pod; pods started since the last answer that fit have no attribution until
  ``List`` fits again, which the log says too. With no answer that fit yet (the
  exporter started on a node already that full) or a kubelet without ``Get``, the
  backend is down with a message saying so, as before. Such a partial answer is
  right for attribution but is no proof that a pod holds no device: the node
  agent, which resets a device only then, asks ``whole_pods``, which refuses it.
"""

from __future__ import annotations

import json
import logging
import os
import stat
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from accel_common.names import DRA_AMD_GPU
from exporter import dra
from exporter.backends.base import Backend, BackendOptions, MissingFields
from exporter.model import BackendUnavailableError, DeviceInfo, PodAssignment, Reading

if TYPE_CHECKING:
    import grpc

    from exporter.kubelet import podresources_pb2 as pb
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

# What one container may hold through DRA: a pod names at most 128 claims and a
# claim's allocation holds at most 32 devices (resource/v1's limits). Names are DNS
# labels or subdomains (253), a pool name a few of them joined by "/".
MAX_CLAIMS = 128
MAX_CLAIM_DEVICES = 32
MAX_NAME = 253
MAX_POOL = 1024

# The largest answer the PodResources client accepts (gRPC's channel option
# grpc.max_receive_message_length; its default is 4 MiB). See the module docstring.
MAX_ANSWER_BYTES = 64 * 1024 * 1024
# The pods read one by one when List is over the limit: the names the last List
# that fit gave, at most this many (a kubelet's maxPods may be raised to 250 and
# beyond, rarely past 1,000), and all of them within ONE_BY_ONE_SECONDS.
MAX_KNOWN_PODS = 2048
ONE_BY_ONE_SECONDS = 5.0
# Where missing.note files the pods that were dropped (the bookkeeping is per device;
# the kubelet backend has none of its own).
PODS = "pods"

# How often the node's ResourceSlices are listed again, and how soon when a device
# the kubelet names is not in them (a driver that just published it).
SLICES_REFRESH_SECONDS = 60.0
SLICES_MISS_SECONDS = 10.0
# A node's slices are a few KiB per driver; more than this is not a real answer.
SLICES_MAX_BYTES = 16 * 1024 * 1024


class KubeletError(Exception):
    """A PodResources call failed; the poller marks the backend down and asks it to
    discover again at the next poll."""


class ResourceSlices:
    """This node's ResourceSlices as ``exporter.dra`` references, listed through the
    ``kubernetes`` client (in-cluster, or ``kubeconfig``) and kept between polls.

    ``list_slices`` replaces the client in tests; it returns the slice objects."""

    def __init__(
        self,
        node: str,
        kubeconfig: str = "",
        timeout: float = RPC_TIMEOUT_SECONDS,
        clock: Callable[[], float] = time.monotonic,
        list_slices: Callable[[], list[Any]] | None = None,
    ) -> None:
        self.node = node
        self.kubeconfig = kubeconfig
        self.timeout = timeout
        self.clock = clock
        self._list = list_slices or self._list_from_api
        self._api: Any = None
        self._refs: dict[dra.DraDevice, str] = {}
        self._listed_at: float | None = None
        self._last_error = ""

    def references(self, wanted: list[dra.DraDevice]) -> Mapping[dra.DraDevice, str]:
        now = self.clock()
        age = None if self._listed_at is None else now - self._listed_at
        missing = any(d not in self._refs for d in wanted)
        if age is None or age >= SLICES_REFRESH_SECONDS or (missing and age >= SLICES_MISS_SECONDS):
            self._refresh(now)
        return self._refs

    def _refresh(self, now: float) -> None:
        self._listed_at = now
        try:
            slices = self._list()
        except Exception as e:  # any client or server failure: keep the last answer
            error = f"{type(e).__name__}: {e}".splitlines()[0][:300]
            if error != self._last_error:
                log.warning(
                    "ResourceSlices of node %s could not be listed (%s); DRA devices are "
                    "matched by their names until they can",
                    self.node,
                    error,
                )
            self._last_error = error
            return
        if self._last_error:
            log.info("ResourceSlices of node %s listed again", self.node)
        self._last_error = ""
        self._refs = dra.slice_references(slices, self.node)

    def _list_from_api(self) -> list[Any]:
        from kubernetes import client as k8s

        if self._api is None:
            self._api = k8s.ResourceV1Api(k8s.ApiClient(self._configuration()))
        resp = self._api.list_resource_slice(
            field_selector=f"spec.nodeName={self.node}",
            _preload_content=False,
            _request_timeout=self.timeout,
        )
        try:
            body = resp.read(SLICES_MAX_BYTES + 1)
        finally:
            resp.release_conn()
        if len(body) > SLICES_MAX_BYTES:
            raise ValueError(f"answer over {SLICES_MAX_BYTES} bytes")
        items = json.loads(body).get("items")
        return items if isinstance(items, list) else []

    def _configuration(self) -> Any:
        from kubernetes import client as k8s
        from kubernetes import config as k8s_config

        configuration = k8s.Configuration()
        if not self.kubeconfig and os.environ.get("KUBERNETES_SERVICE_HOST"):
            k8s_config.load_incluster_config(  # type: ignore[no-untyped-call]
                client_configuration=configuration
            )
        else:
            k8s_config.load_kube_config(  # type: ignore[no-untyped-call]
                config_file=self.kubeconfig or None, client_configuration=configuration
            )
        # One try per poll: the next poll is the retry.
        configuration.retries = False
        return configuration

    def close(self) -> None:
        api, self._api = self._api, None
        if api is not None:
            api.api_client.close()


def _usable(value: str, limit: int = MAX_NAME) -> bool:
    return 0 < len(value) <= limit


def _too_large(e: Exception) -> bool:
    """Whether a call failed because its answer is over the receive limit."""
    import grpc

    return (
        isinstance(e, grpc.RpcError)
        and isinstance(e, grpc.Call)
        and e.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    )


def _claimed(
    pod: pb.PodResources, container: pb.ContainerResources
) -> Iterator[tuple[PodAssignment, dra.DraDevice]]:
    """The DRA rows of one container, within the caps, with the device each names."""
    for dyn in container.dynamic_resources[:MAX_CLAIMS]:
        # The claim is in the pod's namespace (a pod can name no other), so
        # claim_namespace adds nothing to the row.
        if not _usable(dyn.claim_name):
            continue
        for res in dyn.claim_resources[:MAX_CLAIM_DEVICES]:
            ref = dra.DraDevice(res.driver_name, res.pool_name, res.device_name)
            if not (_usable(ref.driver) and _usable(ref.device) and len(ref.pool) <= MAX_POOL):
                continue
            row = PodAssignment(
                namespace=pod.namespace,
                pod=pod.name,
                container=container.name,
                resource=ref.driver,
                device_id=ref.device,
                claim=dyn.claim_name,
            )
            yield row, ref


class KubeletBackend(Backend):
    name = "kubelet"
    # Polled by default: on a node without a kubelet it costs one stat per poll and
    # one log line, and on a Kubernetes node pod attribution then needs no flag.
    hardware = True

    def __init__(
        self,
        options: BackendOptions,
        timeout: float = RPC_TIMEOUT_SECONDS,
        slices: ResourceSlices | None = None,
        max_answer_bytes: int = MAX_ANSWER_BYTES,
    ) -> None:
        super().__init__(options)
        self.timeout = timeout
        self.max_answer_bytes = max_answer_bytes
        # Pods of the last List that fit, read one by one while List does not.
        self._known: list[tuple[str, str]] = []
        self._one_by_one = False
        # pod ("namespace/name") -> why it has no attribution in this poll's rows.
        self.missing = MissingFields(log)
        self.missing.begin(PODS, {})
        self._channel: grpc.Channel | None = None
        self._stub: PodResourcesListerStub | None = None
        # close() runs on the event loop's thread, the calls on the poll thread.
        self._lock = threading.Lock()
        if slices is None and options.dra_resource_slices:
            slices = ResourceSlices(options.dra_node_name, options.dra_kubeconfig, timeout)
        self.slices = slices

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
                self._channel = grpc.insecure_channel(
                    f"unix://{self.socket_path}",
                    options=[("grpc.max_receive_message_length", self.max_answer_bytes)],
                )
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
        A device a ResourceClaim gave is a row with ``claim`` set, the driver as the
        resource and the ``exporter.dra`` reference as the ID, whatever the driver.

        Past the receive limit this is what fits (the pods read one by one): right
        for attribution, but no proof that a pod holds no device, since a pod
        started since the last whole answer is missing; ``whole_pods`` is for that.
        """
        return self._pods(partial=True)

    def whole_pods(self) -> list[PodAssignment]:
        """The rows of every pod, as ``pods``, or ``KubeletError``: never a partial
        answer. For a caller that acts on a pod's absence (the node agent resets a
        device only when no pod holds one)."""
        return self._pods(partial=False)

    def _pods(self, partial: bool) -> list[PodAssignment]:
        if not os.path.exists(self.socket_path):
            self._drop_channel()
            raise KubeletError(f"kubelet pod-resources socket {self.socket_path} went away")
        from exporter.kubelet import podresources_pb2 as pb

        try:
            resp = self._lister().List(pb.ListPodResourcesRequest(), timeout=self.timeout)
        except Exception as e:
            if not _too_large(e):
                raise self._failed(e) from None
            if not partial:
                raise KubeletError(
                    f"kubelet pod-resources at {self.socket_path}: the List answer is over "
                    f"{self.max_answer_bytes} bytes; pods read one by one would miss any "
                    "started since, so they are no proof of which pods hold devices"
                ) from None
            return self._rows(self._pods_one_by_one())
        self.missing.begin(PODS, {})
        if self._one_by_one:
            log.info(
                "kubelet pod-resources List fits in %d bytes again: every pod is attributed",
                self.max_answer_bytes,
            )
            self._one_by_one = False
        self._known = [(p.namespace, p.name) for p in resp.pod_resources[:MAX_KNOWN_PODS]]
        return self._rows(resp.pod_resources)

    def _pods_one_by_one(self) -> list[pb.PodResources]:
        """The pods of the last List that fit, each from its own ``Get``: what fits
        of a node whose whole answer does not."""
        import grpc

        from exporter.kubelet import podresources_pb2 as pb

        where = f"kubelet pod-resources at {self.socket_path}"
        if not self._known:
            raise KubeletError(
                f"{where}: the List answer is over {self.max_answer_bytes} bytes and no "
                "earlier answer named the pods to read one by one; pod attribution is "
                "off until the node's pods and claims fit"
            )
        if not self._one_by_one:
            log.warning(
                "%s: the List answer is over %d bytes; reading the %d pods of the last "
                "answer that fit one by one (pods started since are not attributed "
                "until it fits again)",
                where,
                self.max_answer_bytes,
                len(self._known),
            )
            self._one_by_one = True
        self.missing.begin(PODS, {})
        deadline = time.monotonic() + ONE_BY_ONE_SECONDS
        found: list[pb.PodResources] = []
        for namespace, name in self._known:
            left = deadline - time.monotonic()
            if left <= 0:
                self._drop(namespace, name, "not read: reading pods one by one took too long")
                continue
            request = pb.GetPodResourcesRequest(pod_name=name, pod_namespace=namespace)
            try:
                answer = self._lister().Get(request, timeout=min(self.timeout, left))
            except grpc.RpcError as e:
                code = e.code() if isinstance(e, grpc.Call) else None
                if code == grpc.StatusCode.NOT_FOUND:
                    continue  # the pod ended since
                if code == grpc.StatusCode.RESOURCE_EXHAUSTED:
                    self._drop(
                        namespace, name, f"its own answer is over {self.max_answer_bytes} bytes"
                    )
                    continue
                # Get is off (a kubelet before 1.34 without its feature gate answers
                # UNKNOWN "Get method disabled"), or the kubelet is failing.
                failure = self._failed(e)
                raise KubeletError(
                    f"{failure}; reading pods one by one because the List answer is over "
                    f"{self.max_answer_bytes} bytes"
                ) from None
            found.append(answer.pod_resources)
        return found

    def _drop(self, namespace: str, name: str, reason: str) -> None:
        pod = f"{namespace}/{name}"
        self.missing.note(PODS, [pod], reason)
        self.missing.warn_once(
            ("dropped", pod, reason),
            "kubelet pod-resources: pod %s has no attribution: %s",
            pod,
            reason,
        )

    def _rows(self, pods: Iterable[pb.PodResources]) -> list[PodAssignment]:
        out: list[PodAssignment] = []
        claimed: list[tuple[PodAssignment, dra.DraDevice]] = []
        for pod in pods:
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
                claimed.extend(_claimed(pod, container))
        out.extend(self._identify(claimed))
        return out

    def _identify(self, claimed: list[tuple[PodAssignment, dra.DraDevice]]) -> list[PodAssignment]:
        """The DRA rows with the best device ID the node offers (``exporter.dra``):
        slice attributes, else the amdkfd topology for AMD's names, else the name."""
        if not claimed:
            return []
        refs: Mapping[dra.DraDevice, str] = {}
        if self.slices is not None:
            refs = self.slices.references([ref for _, ref in claimed])
        kfd: Mapping[int, str] | None = None
        if any(ref.driver == DRA_AMD_GPU and ref not in refs for _, ref in claimed):
            kfd = dra.kfd_references(self.options.sysfs)
        out = []
        for row, ref in claimed:
            device_id = dra.reference(ref, refs, kfd)
            out.append(row if device_id == row.device_id else replace(row, device_id=device_id))
        return out

    def close(self) -> None:
        self._drop_channel()
        if self.slices is not None:
            self.slices.close()
