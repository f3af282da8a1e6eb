"""A fake kubelet: a real gRPC server speaking the PodResources v1 API on a unix
socket, with a pod list the test changes between polls.

It is served by ``grpc.server`` with the generated servicer, so the exporter's
client goes through the same channel, framing and status codes as against a real
kubelet; only the answers are scripted.

Devices come two ways, as on a real node:

* A device plugin's (``ContainerResources.devices``): ``add_pod(namespace, name,
  "nvidia.com/gpu", uuid, ...)``, or ``FakeContainer(name, devices={resource: ids})``.
* Dynamic Resource Allocation's (``ContainerResources.dynamic_resources``): a
  ``FakeClaim`` per ResourceClaim, with the devices its allocation holds, each named
  by the triplet the kubelet sends (driver, pool, device), exactly as the claim's
  ``status.allocation.devices.results[]`` has them::

      kubelet.add_claim_pod("ml", "train", "train-gpu", "gpu.nvidia.com", "gpu-0")
      # or, for several claims or containers:
      FakeContainer("main", claims=[FakeClaim("train-gpu", [
          FakeClaimDevice("gpu.nvidia.com", "gpu-0", pool="node-1"),
          FakeClaimDevice("gpu.nvidia.com", "gpu-1-mig-1g10gb-19-0", pool="node-1"),
      ])])

  The device names follow the drivers' own naming (NVIDIA ``gpu-<minor>`` and
  ``gpu-<minor>-mig-<profile>-<profile id>-<placement start>``, AMD
  ``gpu-<card>-<render minor>``; exporter/dra.py). Without ResourceSlices the
  exporter maps ``gpu-<N>`` to its device ``nvidia<N>``; to match by UUID instead,
  serve ResourceSlices for the node from the fake API server and start the exporter
  with ``--dra.resource-slices --dra.node-name <node> --dra.kubeconfig <path>``
  (tests/exporter/test_dra.py shows both). The claim's namespace defaults to the
  pod's, as the kubelet's is always.
"""

from __future__ import annotations

import concurrent.futures
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import grpc

from exporter.kubelet import podresources_pb2 as pb
from exporter.kubelet import podresources_pb2_grpc as pb_grpc


@dataclass
class FakeClaimDevice:
    """One allocated DRA device: ``<driver>/<pool>/<device>``, and the CDI devices
    the driver prepared for it (``k8s.gpu.nvidia.com/claim=<uid>-gpu-0``, any
    string; the exporter does not read them)."""

    driver: str
    device: str
    pool: str = "node-1"
    cdi_devices: list[str] = field(default_factory=list)
    share_id: str | None = None


@dataclass
class FakeClaim:
    """A ResourceClaim a container uses, and the devices it was allocated."""

    name: str
    devices: list[FakeClaimDevice] = field(default_factory=list)
    namespace: str = ""  # "": the pod's


@dataclass
class FakeContainer:
    name: str
    # resource name -> device plugin IDs, e.g. {"nvidia.com/gpu": ["GPU-..."]}
    devices: dict[str, list[str]] = field(default_factory=dict)
    cpu_ids: list[int] = field(default_factory=list)
    claims: list[FakeClaim] = field(default_factory=list)


@dataclass
class FakePod:
    namespace: str
    name: str
    containers: list[FakeContainer] = field(default_factory=list)


def _claim_resource(d: FakeClaimDevice) -> pb.ClaimResource:
    out = pb.ClaimResource(
        cdi_devices=[pb.CDIDevice(name=n) for n in d.cdi_devices],
        driver_name=d.driver,
        pool_name=d.pool,
        device_name=d.device,
    )
    if d.share_id is not None:
        out.share_id = d.share_id
    return out


def _pod_resources(p: FakePod) -> pb.PodResources:
    return pb.PodResources(
        name=p.name,
        namespace=p.namespace,
        containers=[
            pb.ContainerResources(
                name=c.name,
                devices=[
                    pb.ContainerDevices(
                        resource_name=r,
                        device_ids=ids,
                        topology=pb.TopologyInfo(nodes=[pb.NUMANode(ID=0)]),
                    )
                    for r, ids in c.devices.items()
                ],
                cpu_ids=c.cpu_ids,
                dynamic_resources=[
                    pb.DynamicResource(
                        claim_name=claim.name,
                        claim_namespace=claim.namespace or p.namespace,
                        claim_resources=[_claim_resource(d) for d in claim.devices],
                    )
                    for claim in c.claims
                ],
            )
            for c in p.containers
        ],
    )


class _Servicer(pb_grpc.PodResourcesListerServicer):
    def __init__(self, kubelet: FakeKubelet) -> None:
        self.kubelet = kubelet

    def List(
        self, request: pb.ListPodResourcesRequest, context: grpc.ServicerContext
    ) -> pb.ListPodResourcesResponse:
        with self.kubelet.lock:
            self.kubelet.list_calls += 1
            pods = list(self.kubelet.pods)
            delay = self.kubelet.list_delay
        if delay:
            time.sleep(delay)  # a kubelet too busy to answer in time
        return pb.ListPodResourcesResponse(pod_resources=[_pod_resources(p) for p in pods])

    def Get(
        self, request: pb.GetPodResourcesRequest, context: grpc.ServicerContext
    ) -> pb.GetPodResourcesResponse:
        with self.kubelet.lock:
            self.kubelet.get_calls += 1
            pods = list(self.kubelet.pods)
            if not self.kubelet.get_supported:
                # What a kubelet answers without its KubeletPodResourcesGet feature
                # gate (off by default before 1.34): a plain Go error, UNKNOWN.
                context.abort(grpc.StatusCode.UNKNOWN, "PodResources API Get method disabled")
        for p in pods:
            if (p.namespace, p.name) == (request.pod_namespace, request.pod_name):
                return pb.GetPodResourcesResponse(pod_resources=_pod_resources(p))
        context.abort(grpc.StatusCode.NOT_FOUND, f"pod {request.pod_name} not found")

    def GetAllocatableResources(
        self, request: pb.AllocatableResourcesRequest, context: grpc.ServicerContext
    ) -> pb.AllocatableResourcesResponse:
        if not self.kubelet.allocatable_supported:
            # What a kubelet older than 1.21 answers.
            context.abort(grpc.StatusCode.UNIMPLEMENTED, "unknown method")
        with self.kubelet.lock:
            allocatable = dict(self.kubelet.allocatable)
        return pb.AllocatableResourcesResponse(
            devices=[
                pb.ContainerDevices(resource_name=r, device_ids=ids)
                for r, ids in allocatable.items()
            ]
        )


class FakeKubelet:
    """``start()`` serves on ``path``; ``stop()`` stops and removes the socket, as a
    kubelet restart does; ``start()`` again serves on the same path."""

    def __init__(self, path: Path, allocatable_supported: bool = True) -> None:
        self.path = path
        self.lock = threading.Lock()
        self.pods: list[FakePod] = []
        self.allocatable: dict[str, list[str]] = {}
        self.allocatable_supported = allocatable_supported
        self.list_calls = 0
        self.list_delay = 0.0
        self.get_calls = 0
        self.get_supported = True
        self._server: grpc.Server | None = None

    def start(self) -> None:
        server = grpc.server(concurrent.futures.ThreadPoolExecutor(2))
        pb_grpc.add_PodResourcesListerServicer_to_server(_Servicer(self), server)
        server.add_insecure_port(f"unix://{self.path}")
        server.start()
        self._server = server

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop(grace=None).wait(5)
            self._server = None
        self.path.unlink(missing_ok=True)

    def set_pods(self, *pods: FakePod) -> None:
        with self.lock:
            self.pods = list(pods)

    def add_pod(
        self, namespace: str, name: str, resource: str, *device_ids: str, container: str = "main"
    ) -> None:
        """A pod with one container holding ``device_ids`` of ``resource``."""
        pod = FakePod(namespace, name, [FakeContainer(container, {resource: list(device_ids)})])
        with self.lock:
            self.pods.append(pod)

    def add_claim_pod(
        self,
        namespace: str,
        name: str,
        claim: str,
        driver: str,
        *devices: str,
        pool: str = "node-1",
        container: str = "main",
    ) -> None:
        """A pod with one container using ResourceClaim ``claim``, allocated
        ``devices`` (DRA device names) of ``driver`` in ``pool``."""
        allocated = [FakeClaimDevice(driver, d, pool=pool) for d in devices]
        pod = FakePod(
            namespace, name, [FakeContainer(container, claims=[FakeClaim(claim, allocated)])]
        )
        with self.lock:
            self.pods.append(pod)

    def answer_bytes(self, *pods: FakePod) -> int:
        """The size of the List answer for ``pods`` (all of this kubelet's when none
        are named), as it goes over the wire."""
        with self.lock:
            chosen = list(pods or self.pods)
        return pb.ListPodResourcesResponse(
            pod_resources=[_pod_resources(p) for p in chosen]
        ).ByteSize()

    def remove_pod(self, namespace: str, name: str) -> None:
        with self.lock:
            self.pods = [p for p in self.pods if (p.namespace, p.name) != (namespace, name)]
