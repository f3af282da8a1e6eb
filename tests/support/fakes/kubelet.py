"""A fake kubelet: a real gRPC server speaking the PodResources v1 API on a unix
socket, with a pod list the test changes between polls.

It is served by ``grpc.server`` with the generated servicer, so the exporter's
client goes through the same channel, framing and status codes as against a real
kubelet; only the answers are scripted.
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
class FakeContainer:
    name: str
    # resource name -> device plugin IDs, e.g. {"nvidia.com/gpu": ["GPU-..."]}
    devices: dict[str, list[str]] = field(default_factory=dict)
    cpu_ids: list[int] = field(default_factory=list)


@dataclass
class FakePod:
    namespace: str
    name: str
    containers: list[FakeContainer] = field(default_factory=list)


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
            pods = list(self.kubelet.pods)
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

    def remove_pod(self, namespace: str, name: str) -> None:
        with self.lock:
            self.pods = [p for p in self.pods if (p.namespace, p.name) != (namespace, name)]
