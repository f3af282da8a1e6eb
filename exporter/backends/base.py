"""The backend contract: what a vendor adapter gives the poller.

A backend returns data (``DeviceInfo``, ``Reading``, ``Link``), never metric
families, so every vendor lands in the same vocabulary and the renderer stays the
only code that spells metric names. The poller calls a backend from one dedicated
thread with a timeout, so a backend may block in its vendor library; it must not
assume it runs on the event loop, and it must import its vendor library lazily
(inside ``discover``) so that a missing library disables only that backend.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from exporter.model import DeviceInfo, Link, PodAssignment, Reading


@dataclass(frozen=True)
class BackendOptions:
    """Everything a backend may be configured with, from the command line."""

    sysfs: Path = Path("/sys")
    procfs: Path = Path("/proc")
    # (vendor, count) pairs for the sim backend, e.g. (("nvidia", 8), ("amd", 4)).
    sim_devices: tuple[tuple[str, int], ...] = ()
    sim_script: Path | None = None
    sim_seed: int = 0
    # The kubelet's PodResources API socket, for pod attribution.
    kubelet_socket: Path = Path("/var/lib/kubelet/pod-resources/kubelet.sock")
    # The last simulated NVIDIA GPU runs MIG and the last AMD GPU is split in two (DPX),
    # so demos and tests see partitions as child devices.
    sim_partitions: bool = False
    # How many simulated pods hold the sim devices (accel_device_pod_info); 0: none.
    sim_pods: int = 0


class Backend(abc.ABC):
    """One vendor adapter. Subclasses set ``name`` and implement the three calls."""

    name: ClassVar[str]
    # Hardware backends are polled by default; the sim backend is opt-in.
    hardware: ClassVar[bool] = True

    def __init__(self, options: BackendOptions) -> None:
        self.options = options

    @abc.abstractmethod
    def discover(self) -> list[DeviceInfo]:
        """Initialise the vendor library and list the devices. Raise
        ``BackendUnavailableError`` when the library or driver is missing."""

    @abc.abstractmethod
    def read(self, device: DeviceInfo) -> Reading:
        """Poll one device. Raise ``DeviceLostError`` when it stopped answering; or,
        when the loss comes with fault events still to count (an Xid 79 as the GPU
        falls off the bus), return ``Reading(up=False, fault_events=...)`` so the
        fatal fault is counted at the moment it happens."""

    def topology(self) -> list[Link]:
        """Links between this backend's devices; none by default."""
        return []

    def pods(self) -> list[PodAssignment]:
        """Which containers hold which devices, for a backend that knows (the kubelet
        backend, the sim); polled after the devices, every poll."""
        return []

    def close(self) -> None:  # noqa: B027 - an optional hook, not abstract
        """Release the vendor library (shutdown, close handles)."""
