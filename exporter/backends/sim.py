"""Simulated devices of any vendor and count, with scripted faults.

The demo, the tests, the benchmarks and the fleet simulator need devices that behave
like real ones without the hardware: plausible, deterministic load (the same seed
and the same clock give the same numbers, so golden files are stable), and faults
on cue — an Xid 79 and a GPU falling off the bus, an uncorrected ECC burst, a driver
call that never returns. Faults are scripted in YAML (``--sim-script``)::

    events:
      - at: 30s
        device: nvidia3
        fault: 79            # a vendor fault code (NVIDIA Xid, AMD/Intel RAS name)
        lost: true           # falls off the bus: every read fails from now on
      - at: 60s
        device: amd1
        ecc: {uncorrected: 2}
      - at: 90s
        device: nvidia5
        hang: forever        # the read blocks (a wedged driver call); or e.g. 20s
      - at: 100s
        device: nvidia6
        hang: collective     # a hung NCCL ring: busy as before, links silent
      - at: 120s
        device: nvidia3
        recover: true        # answers again (and leaves a hung collective)
      - at: 10s
        device: nvidia0
        set: {utilization: 0.99, temperature: 92}   # hold a value from now on
      - at: 40s
        device: gaudi2
        fault: critical_error   # Gaudi, Ascend and TPU codes as exporter/faults/ names them

Link throughput (``accel_link_throughput_bytes_per_second``, per link and
direction, on the vendors whose real backends publish it: NVIDIA and AMD) follows
the load: half a link's rate at full load, as a busy multi-GPU job's collectives
would. ``hang: collective`` is what a hung collective looks like (every rank's
kernel spinning in an NCCL ring that will never complete): the device answers,
its utilization, power and clocks go on as when it ran, and its links carry
nothing until ``recover``. The fleet simulator's ``collective_hang`` fault has the
same signature (``autoscaler/simulate/links.py``).

Every problem in a script is reported at once, each as ``file:line:col: message``.
A script is input: each field is read from its own node with its type and range
(a list where a device name goes, a 5,000-digit ECC count, a ``!!python`` tag, an
alias that would expand to millions of nodes are each one problem at its place),
and ``--sim-devices`` is bounded (``MAX_SIM_DEVICES_PER_VENDOR``, ``MAX_SIM_DEVICES``).

Identity: every model starts with ``Simulated`` (a dashboard or a person can tell a
simulated device from the hardware it imitates), and UUIDs derive from the host
name (``BackendOptions.sim_host``, which the CLI sets), the seed and the index, so
two simulated nodes with the same seed never share a UUID.

Vendors: ``nvidia``, ``amd``, ``oneapi``, ``gaudi``, ``ascend`` and ``tpu``; what each
device looks like (model, memory, links, which fields its real backend cannot read)
is in ``exporter/backends/sim_models.py``.

Topology: each vendor's devices form simulated nodes of ``group`` devices. NVIDIA
devices of a node are all NVLink peers (an NVSwitch board), AMD devices all xGMI
peers, Gaudis all RoCE peers and Ascends all HCCS peers; TPU chips form a 2x2 ICI
torus of four; Intel devices have no device link, only the PCIe tree, so that the
distance matrix shows every shape: two neighbours share a PCIe switch (``i // 2``),
four share a host bridge (``i // 4``), and the rest are across the system.

Partitions (``--sim-partitions``): the last NVIDIA GPU runs MIG with two instances
(``nvidiaN_mig1`` 3g.40gb, ``nvidiaN_mig9`` 1g.10gb, GPU instance ids as a real H100
would number them) and the last AMD GPU is in DPX mode with two partitions
(``amdN_p0``, ``amdN_p1``). Partitions are child devices with their own utilization
and memory; GPU-wide figures stay on the parent, as the real backends report them.

Pods (``--sim-pods N``): N pods ``sim/train-K`` (container ``main``) hold the devices
that a device plugin would hand out (whole GPUs without partitions, and partitions),
1 to 4 of one resource each as the seed decides, in order; the last pod also shares
the first pod's first device, as time-slicing does. Pods stop when the devices run
out.
"""

from __future__ import annotations

import hashlib
import math
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path

from yaml.nodes import MappingNode, Node, ScalarNode

from accel_common.remedies import LOST_CODE
from accel_common.suggest import did_you_mean
from accel_common.yamlread import ProblemsError, Reader, kind
from exporter.backends import sim_pods
from exporter.backends.base import Backend, BackendOptions
from exporter.backends.sim_models import MODELS, SIMULATED, SimModel, linked, pcie_kind
from exporter.backends.sim_pods import noise
from exporter.model import DeviceInfo, DeviceLostError, FaultEvent, Link, PodAssignment, Reading
from exporter.procmap import Owner


class SimScriptError(ProblemsError):
    """Every problem found in a sim script, one per line."""


@dataclass
class SimEvent:
    at: float
    device: str
    fault: str | None = None
    lost: bool = False
    recover: bool = False
    hang: float | None = None  # seconds; math.inf for forever
    collective: bool = False  # hang: collective (a hung NCCL ring)
    ecc: dict[str, float] = field(default_factory=dict)
    set: dict[str, float] = field(default_factory=dict)


# What ``set`` may hold, and the range of each: ratios are 0-1, and a temperature or
# a power outside what any device reports is a typo, not a scenario.
SETTABLE: dict[str, tuple[float, float]] = {
    "utilization": (0.0, 1.0),
    "memory_used_ratio": (0.0, 1.0),
    "memory_bandwidth": (0.0, 1.0),
    "temperature": (-40.0, 150.0),
    "power": (0.0, 10_000.0),
}
EVENT_KEYS = ("at", "device", "fault", "lost", "recover", "hang", "ecc", "set")
ECC_TYPES = ("corrected", "uncorrected")
# How many devices ``--sim-devices`` may ask for: per vendor, and in one exporter.
MAX_SIM_DEVICES_PER_VENDOR = 1024
MAX_SIM_DEVICES = 2048
# The largest ECC count one event may add: a counter that a rule reads with
# increase() stays exact in a float64 far beyond it.
MAX_ECC_COUNT = 1_000_000_000
# A fault code becomes the ``code`` label value; real ones are a few characters.
MAX_FAULT_CODE = 64


def parse_sim_devices(text: str) -> tuple[tuple[str, int], ...]:
    """``nvidia:8,amd:4`` → (("nvidia", 8), ("amd", 4)); raises ValueError. Counts are
    bounded (``MAX_SIM_DEVICES_PER_VENDOR``, ``MAX_SIM_DEVICES``): every device costs
    memory and work on every poll, and a typo such as ``nvidia:99999999999999``
    would otherwise build devices until the process is out of memory."""
    out: list[tuple[str, int]] = []
    for part in filter(None, (p.strip() for p in text.split(","))):
        vendor, sep, count = part.partition(":")
        if vendor not in MODELS:
            raise ValueError(f"unknown sim vendor {vendor!r} in {part!r} (use {', '.join(MODELS)})")
        if not sep or not count.isascii() or not count.isdigit() or int(count[:12]) < 1:
            raise ValueError(f"bad device count in {part!r} (use VENDOR:COUNT, e.g. nvidia:8)")
        # Compared as text first: int() of thousands of digits is itself refused.
        if len(count) > 6 or int(count) > MAX_SIM_DEVICES_PER_VENDOR:
            raise ValueError(
                f"too many devices in {part!r}: at most {MAX_SIM_DEVICES_PER_VENDOR} "
                "simulated devices per vendor"
            )
        if any(v == vendor for v, _ in out):
            raise ValueError(f"vendor {vendor!r} is named twice")
        out.append((vendor, int(count)))
    if not out:
        raise ValueError("no devices given (use e.g. nvidia:8,amd:4)")
    total = sum(n for _, n in out)
    if total > MAX_SIM_DEVICES:
        raise ValueError(
            f"too many devices in {text.strip()!r}: {total} in all, at most "
            f"{MAX_SIM_DEVICES} simulated devices in one exporter"
        )
    return tuple(out)


def load_script(path: Path, devices: set[str]) -> list[SimEvent]:
    """Parses and validates a sim script; raises SimScriptError naming every problem.
    The script is a list of events, bare or under ``events``; an empty file is none."""
    r = Reader(path)
    root = r.load()
    items: list[Node] = []
    if isinstance(root, MappingNode):
        top = r.mapping(root, "a sim script", ("events",))
        if top is not None and "events" in top:
            items = r.sequence(top["events"][1], "events") or []
    elif root is not None:
        items = r.sequence(root, "a sim script", "a list of events under 'events'") or []
    events = [ev for item in items if (ev := _event(r, item, devices)) is not None]
    if r.problems:
        raise SimScriptError(r.problems)
    return sorted(events, key=lambda e: e.at)


def _event(r: Reader, node: Node, devices: set[str]) -> SimEvent | None:
    """One event. Each field is read from its node with its own type and range, never
    by constructing the whole event: a value of the wrong shape (a list where a
    device name goes, an alias that expands to millions of nodes) is one problem at
    its position, not a Python object to look at."""
    m = r.mapping(node, "an event", EVENT_KEYS, required=("at", "device"))
    if m is None:
        return None
    ev = SimEvent(at=-1.0, device="")
    for key, (_, v) in m.items():
        if key not in ("ecc", "set") and not _scalar(r, v, key):
            continue
        if key == "at":
            ev.at = -1.0 if (at := r.duration(v, key)) is None else at
        elif key == "hang":
            _hang(r, v, ev)
        elif key == "device":
            name = r.written(v, "device (a simulated device name, e.g. nvidia0)")
            if name is not None and name not in devices:
                hint = did_you_mean(name, sorted(devices))
                r.problem(v, f"no simulated device {name!r}{hint}")
            ev.device = name or ""
        elif key == "fault":
            code = r.written(v, "fault (a vendor fault code, e.g. 79 or ras_uncorrectable)")
            if code is not None and len(code) > MAX_FAULT_CODE:
                r.problem(v, f"fault must be a fault code of at most {MAX_FAULT_CODE} characters")
            elif code is not None:
                ev.fault = code
        elif key in ("lost", "recover"):
            setattr(ev, key, bool(r.boolean(v, key)))
        elif key == "ecc":
            _ecc(r, v, ev)
        elif key == "set":
            _settings(r, v, ev)
    return ev


def _scalar(r: Reader, node: Node, what: str) -> bool:
    """Whether a value is one scalar, as every field of an event is; a list or a
    mapping is reported here and never constructed (an alias may make it huge)."""
    if isinstance(node, ScalarNode):
        return True
    r.problem(node, f"{what} must be a single value, got {kind(node)}")
    return False


def _hang(r: Reader, node: Node, ev: SimEvent) -> None:
    """``hang: forever`` (or ``true``), or how long, as a duration; or
    ``collective``: the reads go on, the links go silent."""
    if isinstance(node, ScalarNode) and node.value == "collective":
        ev.collective = True
        return
    if isinstance(node, ScalarNode) and node.value in ("forever", "true", "True", "TRUE"):
        ok, value = r.construct(node)
        if ok and (value is True or value == "forever"):
            ev.hang = math.inf
            return
    seconds = r.duration(node, "hang (forever, collective, or a duration such as 20s)")
    if seconds is not None:
        ev.hang = seconds


def _ecc(r: Reader, node: Node, ev: SimEvent) -> None:
    """``ecc: {corrected: N, uncorrected: N}``: errors the device counts at once."""
    m = r.mapping(node, "ecc (a mapping of corrected/uncorrected to counts)", ECC_TYPES)
    for key, (_, v) in (m or {}).items():
        if not _scalar(r, v, f"ecc.{key}"):
            continue
        digits = str(v.value).lstrip("+-").replace("_", "")
        if digits.isdigit() and len(digits) > len(str(MAX_ECC_COUNT)):
            # Refused as text: thousands of digits are costly (or refused) as an int.
            r.problem(v, f"ecc.{key} must be at most {MAX_ECC_COUNT}, got {len(digits)} digits")
            continue
        count = r.integer(v, f"ecc.{key}", 0)
        if count is not None and count > MAX_ECC_COUNT:
            r.problem(v, f"ecc.{key} must be at most {MAX_ECC_COUNT}, got {count}")
        elif count is not None:
            ev.ecc[key] = float(count)


def _settings(r: Reader, node: Node, ev: SimEvent) -> None:
    """``set: {utilization: 0.9}``: values the device holds from the event on."""
    m = r.mapping(node, "set (a mapping, e.g. {utilization: 0.9})", None)
    for name, (_, v) in (m or {}).items():
        if name not in SETTABLE:
            r.problem(
                node,
                f"cannot set {name!r}{did_you_mean(name, tuple(SETTABLE))} "
                f"(settable: {', '.join(SETTABLE)})",
            )
            continue
        if not _scalar(r, v, f"set.{name}"):
            continue
        low, high = SETTABLE[name]
        value = r.number(v, f"set.{name}", low, high)
        if value is not None:
            ev.set[name] = value


@dataclass
class _DeviceState:
    info: DeviceInfo
    spec: SimModel
    index: int
    phase: float
    lost: bool = False
    hang_until: float = 0.0
    collective_hung: bool = False  # a hung collective: busy, links silent
    ecc: dict[str, float] = field(default_factory=lambda: {"corrected": 0.0, "uncorrected": 0.0})
    held: dict[str, float] = field(default_factory=dict)
    pending_faults: list[FaultEvent] = field(default_factory=list)
    energy: float = 0.0
    last_t: float | None = None
    # A partition's parent and its share of the parent's memory; None for a whole GPU.
    parent: _DeviceState | None = None
    share: float = 1.0


class SimBackend(Backend):
    name = "sim"
    hardware = False

    def __init__(
        self, options: BackendOptions, clock: Callable[[], float] = time.monotonic
    ) -> None:
        super().__init__(options)
        self.clock = clock
        self.start = clock()
        self._devices: dict[str, _DeviceState] = {}
        self._events: list[SimEvent] = []
        self._next_event = 0
        self._released = threading.Event()
        self._lock = threading.Lock()
        slot = 0  # PCI slots are numbered across vendors, as on one real host
        for vendor, count in options.sim_devices:
            spec = MODELS[vendor]
            for i in range(count):
                slot += 1
                name = f"{vendor}{i}"
                info = DeviceInfo(
                    device=name,
                    vendor=vendor,
                    uuid=self._uuid(vendor, i),
                    model=f"{SIMULATED} {spec.model}",
                    pci_bus_id=f"{slot // 256:04x}:{slot % 256:02x}:00.0",
                    driver_version=spec.driver,
                    numa_node=str(0 if i % spec.group < spec.group // 2 else 1),
                )
                phase = noise(options.sim_seed, name, 0, "phase") * 2 * math.pi
                self._devices[name] = _DeviceState(info, spec, i, phase)
            if options.sim_partitions:
                self._partition(self._devices[f"{vendor}{count - 1}"])
        if options.sim_script is not None:
            self._events = load_script(options.sim_script, set(self._devices))
        self._layout = sim_pods.layout(
            [sim_pods.SimDevice(d.info, d.index) for d in self._devices.values()],
            sim_pods.Options(
                options.sim_seed,
                options.sim_pods,
                options.sim_claims,
                options.sim_sharing,
                options.sim_host,
            ),
        )
        if self._layout.idle:
            # The idle pod's GPU waits; a script's ``set`` still overrides it.
            self._devices[self._layout.idle].held["utilization"] = sim_pods.IDLE_UTILIZATION

    def _partition(self, parent: _DeviceState) -> None:
        """Adds the partitions of one GPU as child devices (see the module docstring);
        other vendors' devices are not partitioned here: their backends report none."""
        vendor, name = parent.info.vendor, parent.info.device
        parts: list[tuple[str, str, str, float]]  # (suffix, uuid, profile, memory share)
        if vendor == "nvidia":
            parts = [
                (f"_mig{gi}", f"MIG-{self._uuid(vendor, parent.index)[4:-4]}{gi:04x}", prof, share)
                for gi, prof, share in ((1, "3g.40gb", 0.5), (9, "1g.10gb", 0.125))
            ]
        elif vendor == "amd":
            parts = [
                (f"_p{k}", f"{self._uuid(vendor, parent.index)[:-1]}{k}", "DPX", 0.5)
                for k in range(2)
            ]
        else:
            return
        for suffix, uuid, profile, share in parts:
            child = f"{name}{suffix}"
            info = DeviceInfo(
                device=child,
                vendor=vendor,
                uuid=uuid,
                model=parent.info.model,
                pci_bus_id=parent.info.pci_bus_id,
                driver_version=parent.info.driver_version,
                numa_node=parent.info.numa_node,
                cpu_affinity=parent.info.cpu_affinity,
                parent=name,
                profile=profile,
            )
            phase = noise(self.options.sim_seed, child, 0, "phase") * 2 * math.pi
            self._devices[child] = _DeviceState(
                info, parent.spec, parent.index, phase, parent=parent, share=share
            )

    def _uuid(self, vendor: str, i: int) -> str:
        """The same for a host, seed, vendor and index; another host's differ, so
        that two simulated nodes never share a device (the CLI names this host).
        Without a host (tests' goldens) it is the seed, vendor and index alone."""
        host = self.options.sim_host
        key = (
            f"{host}/{self.options.sim_seed}/{vendor}/{i}"
            if host
            else f"{self.options.sim_seed}/{vendor}/{i}"
        )
        h = hashlib.sha256(key.encode()).hexdigest()
        if vendor == "nvidia":
            return f"GPU-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"
        if vendor == "amd":
            return f"0x{h[:16]}"
        return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"

    def discover(self) -> list[DeviceInfo]:
        return [d.info for d in self._devices.values()]

    def topology(self) -> list[Link]:
        """Device links of each simulated node, or the PCIe tree for a vendor without
        device links (see the module docstring). Partitions share their parent's
        place and have no links of their own."""
        whole = [d for d in self._devices.values() if d.parent is None]
        out: list[Link] = []
        for a in whole:
            for b in whole:
                if a is b or a.info.vendor != b.info.vendor:
                    continue
                spec = a.spec
                if spec.link_type == "pcie":
                    out.append(Link(a.info.device, b.info.device, pcie_kind(a.index, b.index), 1))
                elif linked(spec, a.index, b.index):
                    n = spec.pair_links or spec.links
                    out.append(Link(a.info.device, b.info.device, spec.link_type, n))
        return out

    def pods(self) -> list[PodAssignment]:
        """The pods of ``--sim-pods`` (``exporter/backends/sim_pods.py``), the same
        for a seed."""
        return list(self._layout.rows)

    def process_owners(self, pids: Iterable[int]) -> Mapping[int, Owner]:
        """The owners of the made-up processes that ``--sim-sharing`` lists."""
        return sim_pods.owners(self._layout, list(pids), self.options.sim_seed)

    def elapsed(self) -> float:
        return self.clock() - self.start

    def _advance(self, now: float) -> None:
        """Applies every scripted event that is due."""
        with self._lock:
            while self._next_event < len(self._events) and self._events[self._next_event].at <= now:
                ev = self._events[self._next_event]
                self._next_event += 1
                d = self._devices[ev.device]
                if ev.fault is not None:
                    d.pending_faults.append(FaultEvent(ev.fault, f"sim script at {ev.at:g}s"))
                for t, n in ev.ecc.items():
                    d.ecc[t] += n
                d.held.update(ev.set)
                if ev.lost:
                    d.lost = True
                if ev.recover:
                    d.lost, d.hang_until, d.collective_hung = False, 0.0, False
                if ev.collective:
                    d.collective_hung = True
                if ev.hang is not None:
                    d.hang_until = ev.at + ev.hang

    def read(self, device: DeviceInfo) -> Reading:
        now = self.elapsed()
        self._advance(now)
        d = self._devices[device.device]
        if d.parent is not None:
            return self._read_partition(d, now)
        if d.hang_until > now:
            # A wedged driver call: block the backend's thread like real NVML would.
            wait = None if math.isinf(d.hang_until) else d.hang_until - now
            self._released.wait(wait)
        faults, d.pending_faults = d.pending_faults, []
        if d.lost:
            # Like NVML, the fault events raised before the loss are still delivered.
            if faults:
                # With the loss itself, which the poller counts once.
                faults.append(FaultEvent(LOST_CODE, "simulated device fell off the bus"))
                return Reading(
                    up=False, down_reason="GPU has fallen off the bus", fault_events=faults
                )
            raise DeviceLostError("simulated device fell off the bus")
        return self._reading(d, now, faults)

    def _read_partition(self, d: _DeviceState, now: float) -> Reading:
        """A partition reports its own utilization and memory, as a MIG instance does
        through GPM, and falls with its parent."""
        parent = d.parent
        assert parent is not None
        if parent.lost or d.lost:
            raise DeviceLostError("simulated device fell off the bus")
        faults, d.pending_faults = d.pending_faults, []
        seed, name, sec = self.options.sim_seed, d.info.device, int(now)
        wave = 0.5 + 0.35 * math.sin(2 * math.pi * now / 600.0 + d.phase)
        util = min(1.0, max(0.0, wave + 0.1 * (noise(seed, name, sec, "u") - 0.5)))
        total = d.spec.memory_bytes * d.share
        r = Reading(
            utilization=d.held.get("utilization", round(util, 4)),
            memory_used_bytes=float(int(total * d.held.get("memory_used_ratio", 0.2 + 0.6 * wave))),
            memory_total_bytes=total,
            fault_events=faults,
        )
        self._list_processes(d, r, sec)
        return r

    def _reading(self, d: _DeviceState, now: float, faults: list[FaultEvent]) -> Reading:
        seed, name, sec = self.options.sim_seed, d.info.device, int(now)
        spec = d.spec
        # A slow diurnal-like wave (period 10 min) plus per-second jitter, per device.
        wave = 0.5 + 0.35 * math.sin(2 * math.pi * now / 600.0 + d.phase)
        util = min(1.0, max(0.0, wave + 0.1 * (noise(seed, name, sec, "u") - 0.5)))
        util = d.held.get("utilization", round(util, 4))
        mem_ratio = d.held.get("memory_used_ratio", round(0.2 + 0.6 * wave, 4))
        bw = d.held.get("memory_bandwidth", round(min(1.0, 0.8 * util), 4))
        power = d.held.get(
            "power", round(spec.idle_watts + (spec.tdp_watts - spec.idle_watts) * util, 2)
        )
        temp = d.held.get("temperature", round(32.0 + 50.0 * util, 1))
        if d.last_t is not None:
            d.energy += power * max(0.0, now - d.last_t)
        d.last_t = now
        # Half a link's rate at full load; nothing while the ring hangs.
        link_rate = 0.0 if d.collective_hung else spec.link_bytes_per_second * util * 0.5
        r = Reading(
            utilization=util,
            memory_used_bytes=float(int(spec.memory_bytes * mem_ratio)),
            memory_total_bytes=spec.memory_bytes,
            memory_bandwidth_utilization=bw,
            memory_bandwidth_source=spec.bandwidth_source,
            ecc_errors=dict(d.ecc),
            fault_events=faults,
            temperatures={spec.sensors[0]: temp, spec.sensors[1]: round(temp + 6.0, 1)},
            power_watts=power,
            power_limit_watts=spec.tdp_watts,
            energy_joules=round(d.energy, 3),
            clocks_hz={
                "graphics": round(spec.max_clock_hz * (0.6 + 0.4 * util), -6),
                "memory": spec.memory_clock_hz,
            },
            throttle={"power_cap": power >= spec.tdp_watts * 0.97, "thermal": temp >= 88.0},
            pcie_bytes_per_second={
                "rx": round(2e9 * util, 0),
                "tx": round(1e9 * util, 0),
            },
        )
        if d.info.vendor == "nvidia":
            # An uncorrected error marks a row for remapping, as on Ampere and newer.
            remapped = 1.0 if d.ecc["uncorrected"] > 0 else 0.0
            r.remapped_rows = {
                "correctable": 0.0,
                "uncorrectable": remapped,
                "pending": remapped,
                "failure": 0.0,
            }
        for link in range(spec.links):
            for direction in ("rx", "tx"):
                r.link_bytes_per_second[(str(link), direction)] = round(link_rate, 0)
            for typ in spec.link_error_types:
                r.link_errors[(str(link), typ)] = 0.0
        self._list_processes(d, r, sec)
        if spec.missing:
            # What the vendor's real backend cannot read is absent, never 0.
            blank = Reading()
            for f in fields(Reading):
                if f.name in spec.missing:
                    setattr(r, f.name, getattr(blank, f.name))
        return r

    def _list_processes(self, d: _DeviceState, r: Reading, second: int) -> None:
        """With ``--sim-sharing``, the processes of the pods that hold the device, as
        NVML and AMD SMI list them (other vendors' backends list none)."""
        if not self.options.sim_sharing or d.info.vendor not in sim_pods.LISTS_PROCESSES:
            return
        r.processes = sim_pods.processes(
            self._layout,
            d.info,
            r.utilization or 0.0,
            r.memory_used_bytes or 0.0,
            self.options.sim_seed,
            second,
        )
        r.processes_listed = True

    def close(self) -> None:
        # Release any read blocked in a scripted hang, so shutdown is prompt.
        self._released.set()
