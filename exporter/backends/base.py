"""The backend contract: what a vendor adapter gives the poller.

A backend returns data (``DeviceInfo``, ``Reading``, ``Link``), never metric
families, so every vendor lands in the same vocabulary and the renderer stays the
only code that spells metric names. The poller calls a backend from one dedicated
thread with a timeout, so a backend may block in its vendor library; it must not
assume it runs on the event loop, and it must import its vendor library lazily
(inside ``discover``) so that a missing library disables only that backend.

What the vendor backends share beyond the contract lives here too, so that it is
written once: ``MissingFields``, the "this field is absent, here is why, and a
failure is logged once" bookkeeping, and ``FIRST_SAMPLE``, the reason every rate
gives on its first poll.
"""

from __future__ import annotations

import abc
import logging
from collections.abc import Container, Iterable, Mapping, MutableMapping
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from exporter.model import DeviceInfo, Link, PodAssignment, Reading
from exporter.procmap import Owner


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
    # --dra.resource-slices: the kubelet backend reads this node's ResourceSlices to
    # match DRA devices by their attributes (exporter/dra.py); the node's name and an
    # optional kubeconfig ("" = in-cluster, else $KUBECONFIG) say where.
    dra_resource_slices: bool = False
    dra_node_name: str = ""
    dra_kubeconfig: str = ""
    # The last simulated NVIDIA GPU runs MIG and the last AMD GPU is split in two (DPX),
    # so demos and tests see partitions as child devices.
    sim_partitions: bool = False
    # How many simulated pods hold the sim devices (accel_device_pod_info); 0: none.
    sim_pods: int = 0
    # Some simulated pods hold their devices through ResourceClaims (DRA), and some
    # share devices (time-slicing, MPS) with per-process use listed (sim.py).
    sim_claims: bool = False
    sim_sharing: bool = False
    # The host the simulated devices are in: their UUIDs derive from it, so that two
    # simulated nodes differ. The CLI sets this machine's name; "" leaves it out.
    sim_host: str = ""
    # The oneapi backend publishes GPUs and accelerators; the CPU that an OpenCL
    # runtime also lists (and the cpu backend exports) only when asked.
    oneapi_include_cpu: bool = False
    # The ascend backend's libdcmi.so; "" searches the loader path and the NPU
    # driver's install directories.
    ascend_dcmi_library: str = ""
    # libtpu's runtime metrics service (host:port, loopback), read by the tpu backend.
    tpu_runtime_address: str = "localhost:8431"
    # The kernel log the nvidia backend reads NVLink Xid payloads from (--path.kmsg,
    # /dev/kmsg from the command line); None: not read, NVLink Xids keep their
    # catalogue class.
    kmsg_path: Path | None = None
    # Where the node agent asks the nvidia backend to let go of NVML for a GPU reset
    # (accel_common.nvmlhold; --path.nvml-hold); None: never asked.
    nvml_hold_dir: Path | None = None


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

    def process_owners(self, pids: Iterable[int]) -> Mapping[int, Owner] | None:
        """Who the processes a reading lists belong to, for a backend that knows
        (the sim, whose processes are made up); None: the poller asks ``/proc``
        (``exporter.procmap``), as for every real device."""
        return None

    def layout_changed(self) -> bool:
        """Whether the devices found by ``discover`` are no longer the devices there
        (MIG instances or AMD partitions made or removed, as the node agent does): the
        poller then discovers again before the next read. Cheap, and never raises."""
        return False

    def close(self) -> None:  # noqa: B027 - an optional hook, not abstract
        """Release the vendor library (shutdown, close handles)."""


# The reason a rate (between two polls of a cumulative counter) gives on the first poll.
FIRST_SAMPLE = "first sample taken; a rate needs two polls"


class MissingFields(dict[str, dict[str, str]]):
    """device -> field key -> why the last read of that device has no value for it;
    and the warnings about such failures, each said once.

    Every vendor backend keeps the same habit, and this is its one home:

    * A field a device cannot give is left out of the ``Reading`` (never reported as
      0) and its reason is kept here, so that ``bench/nvml_check.py``, the tests and an
      operator can ask why a metric is absent. Field keys are the backend's ``FIELDS``
      (``utilization``, ``clocks_hz.graphics``...).
    * Reasons that stay true while the driver is loaded (unsupported, no permission)
      are the device's *static* reasons: the backend keeps them with the device, does
      not ask for those fields again, and ``begin`` starts every read from them.
    * A transient or unexpected failure is logged at WARNING once per mark (a device,
      what failed, and why) for the backend's life, not once per poll; an answer that
      is normal (unsupported, no data yet) is not logged at all.

    It is a plain dict to its readers (``backend.missing["nvidia0"]["power_watts"]``);
    ``clear()`` forgets the reasons at rediscovery but not what was already logged.
    """

    def __init__(self, log: logging.Logger) -> None:
        super().__init__()
        self._log = log
        self._said: set[tuple[str, ...]] = set()

    def begin(self, device: str, static: Mapping[str, str]) -> dict[str, str]:
        """Starts a read of ``device``: its reasons are its static ones, copied; the
        returned dict is the one the read fills."""
        reasons = dict(static)
        self[device] = reasons
        return reasons

    def note(
        self,
        device: str,
        keys: Iterable[str],
        reason: str,
        static: MutableMapping[str, str] | None = None,
    ) -> None:
        """Records why ``keys`` have no value in this read of ``device``; with
        ``static`` (the device's static reasons), also for every later read."""
        reasons = self[device]
        for key in keys:
            reasons[key] = reason
            if static is not None:
                static[key] = reason

    def warn_once(self, mark: tuple[str, ...], message: str, *args: object) -> None:
        """Logs ``message`` (a logging format with ``args``) at WARNING the first time
        ``mark`` is seen, and never again for that mark."""
        if mark in self._said:
            return
        self._said.add(mark)
        self._log.warning(message, *args)

    def settle(
        self, device: str, fields: Iterable[str], found: Container[str], default: str
    ) -> None:
        """Ends a read of ``device``: each key of ``fields`` is then either ``found``
        (its reason, if any, dropped) or has a reason (``default`` where the read
        recorded none)."""
        reasons = self[device]
        for key in fields:
            if key in found:
                reasons.pop(key, None)
            else:
                reasons.setdefault(key, default)
