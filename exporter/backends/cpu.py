"""The CPU backend: each CPU socket is a device, so a host with no accelerator still
exports something true (how busy it is, how much memory it holds, how hot and how
hungry it runs).

Everything is read from sysfs and procfs through ``--path.sysfs``/``--path.procfs``
(node_exporter's habit), so the tests run against a fixture tree; nothing here needs
a library or privileges, and a file that is missing or unreadable leaves its field
out rather than reporting 0.

Choices worth knowing:

* **Sockets** come from ``topology/physical_package_id`` of the online CPUs, read
  once at discovery (the poller discovers once); a socket whose CPUs have all gone
  offline since is reported down.
* **Utilization** is busy/total jiffies over the socket's CPUs in ``/proc/stat``
  between two reads, with busy = total - idle - iowait (iowait is time the CPU had
  nothing to run). The first read uses the counters since boot: that is still a
  true busy fraction, over a longer window, and it spares the first scrapes after
  a restart a gap. ``guest`` time is already inside ``user``, so it is not added.
* **Memory** follows ``free``: used = total - available. The kernel publishes
  ``MemAvailable`` for the whole host only, so a multi-socket host splits the
  host's figure over the NUMA nodes of each socket in proportion to what each node
  could give back (free + file pages + reclaimable slab, the ingredients of the
  kernel's own estimate); the sockets then add up to exactly what ``free`` says. A
  single socket reports the host's ``/proc/meminfo``. When sockets share NUMA nodes
  (NUMA off in the firmware) memory is not attributable to a socket and is left out
  instead of being counted twice.
* **Temperature** comes from the coretemp, k10temp or zenpower hwmon driver; the
  ``package`` sensor is "Package id N" (Intel) or Tctl (AMD). Per-core sensors are
  skipped: one series per core adds cardinality that no socket-level rule reads.
* **Energy** comes from RAPL's ``energy_uj``, which wraps at
  ``max_energy_range_uj``: the backend accumulates deltas so that
  ``accel_energy_joules_total`` only goes up, and power is the energy delta over
  the time between two reads. RAPL counters are readable by root only on most
  kernels since 2020 (the PLATYPUS side channel), so an unprivileged exporter simply
  has no energy or power fields.
* **Bounded reads.** Every file goes through ``accel_common.readfile`` (sysfs
  attributes capped at 64 KiB; ``/proc/stat`` and ``/proc/cpuinfo``, which grow with
  the host, at 32 MiB), numbers are at most 64-bit, and a CPU list expands to at most
  ``MAX_CPUS`` entries: a ``cpu/online`` reading ``0-400000000`` is a bad field, not
  400 million set entries. A file that is there but unusable leaves its field out with
  its reason in ``missing`` and one warning; the socket keeps its identity and
  ``accel_up``.
"""

from __future__ import annotations

import logging
import os
import re
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

from accel_common.readfile import TABLE_LIMIT, TEXT_LIMIT, FieldError, parse_int, read_text
from exporter.backends.base import Backend, BackendOptions, MissingFields
from exporter.model import BackendUnavailableError, DeviceInfo, DeviceLostError, Reading

log = logging.getLogger("accel_exporter.cpu")

# hwmon drivers that report CPU package temperatures.
_HWMON_DRIVERS = frozenset({"coretemp", "k10temp", "zenpower"})
# coretemp names its package sensor "Package id N" ("Physical id N" before Linux 3.x).
_CORETEMP_PACKAGE = re.compile(r"^(?:Package|Physical) id (\d+)$")
_CORETEMP_CORE = re.compile(r"^Core \d+$")
# k10temp/zenpower: Tctl is the control temperature the firmware throttles on.
_AMD_SENSOR = re.compile(r"^T(die|ccd\d+)$")
# AMD's data-fabric function 3, where k10temp binds: node N is PCI device 0x18 + N.
_AMD_DF_DEVICE = re.compile(r"^[0-9a-f]{4}:[0-9a-f]{2}:([0-9a-f]{2})\.3$")
_RAPL_ZONE = re.compile(r"^intel-rapl:\d+$")
_RAPL_PACKAGE = re.compile(r"^package-(\d+)(?:-die-\d+)?$")
# SMBIOS says an all-zero UUID is "not present" and all-F "not set"; neither tells
# two machines apart, so neither may stand in a fleet-unique uuid label.
_PLACEHOLDER_UUIDS = frozenset(
    {"00000000-0000-0000-0000-000000000000", "ffffffff-ffff-ffff-ffff-ffffffffffff"}
)
_KIB = 1024
# The most CPUs a range list may name: Linux's NR_CPUS tops out at 8,192 (MAXSMP), so
# 65,536 leaves room for any real host and refuses a list no kernel writes.
MAX_CPUS = 65_536


def parse_cpu_list(text: str, path: Path | None = None) -> set[int]:
    """A kernel range list ("0-3,8-11") as a set of CPU (or node) numbers;
    ``FieldError`` when it is not one, or names more than ``MAX_CPUS``."""
    out: set[int] = set()
    count = 0
    for part in text.strip().split(","):
        if not part:
            continue
        lo_text, _, hi_text = part.partition("-")
        lo = parse_int(lo_text, path=path)
        hi = parse_int(hi_text, path=path) if hi_text else lo
        if lo < 0 or hi < lo:
            raise FieldError(f"not a CPU range: {part[:40]!r}", path)
        count += hi - lo + 1
        if count > MAX_CPUS:
            raise FieldError(f"names more than {MAX_CPUS} CPUs", path)
        out.update(range(lo, hi + 1))
    return out


def _number(text: str) -> int | None:
    """A decimal field of a procfs table (at most 64-bit), None when it is not one."""
    try:
        return parse_int(text)
    except FieldError:
        return None


def _meminfo(text: str) -> dict[str, int]:
    """``/proc/meminfo`` or a node's ``meminfo`` as field -> kB. Node files prefix
    each line with "Node N", which is skipped."""
    out: dict[str, int] = {}
    for line in text.splitlines():
        parts = line.split()
        if parts[:1] == ["Node"]:
            parts = parts[2:]
        if len(parts) >= 2 and parts[0].endswith(":"):
            value = _number(parts[1])
            if value is not None:
                out[parts[0][:-1]] = value
    return out


@dataclass
class _CpuTimes:
    busy: int
    total: int


@dataclass
class _RaplZone:
    last_uj: int
    total_uj: int


@dataclass
class _Socket:
    socket: int
    cpus: frozenset[int]
    nodes: tuple[int, ...]
    # "host": the host's /proc/meminfo; "nodes": this socket's NUMA nodes; "": left out.
    memory_from: str
    previous_times: dict[int, _CpuTimes] = field(default_factory=dict)
    previous_energy: tuple[float, float] | None = None


class CpuBackend(Backend):
    name: ClassVar[str] = "cpu"

    def __init__(
        self, options: BackendOptions, clock: Callable[[], float] = time.monotonic
    ) -> None:
        super().__init__(options)
        # Power is energy over elapsed time; tests pass a fake clock.
        self._clock = clock
        self._sockets: dict[str, _Socket] = {}
        self._rapl: dict[str, _RaplZone] = {}
        # device -> field key -> why the last read has no value for it; and each bad
        # file warned about once.
        self.missing = MissingFields(log)
        self._reading = ""  # the device being read, whose reasons a bad file joins

    # -- files -----------------------------------------------------------------------

    def _read(self, path: Path, key: str = "", limit: int = TEXT_LIMIT) -> str | None:
        """The file's text, or None when it is absent or unusable: a field that
        cannot be read is left out, never guessed. An unusable file (not UTF-8, over
        ``limit``, not a regular file) is warned about once and its reason kept
        under ``key`` for the device being read."""
        try:
            return read_text(path, limit)
        except FieldError as e:
            if not e.absent:
                self._bad(e, key)
            return None

    def _read_int(self, path: Path, key: str = "") -> int | None:
        text = self._read(path, key)
        if text is None:
            return None
        try:
            return parse_int(text, path=path)
        except FieldError as e:
            self._bad(e, key)
            return None

    def _bad(self, e: FieldError, key: str = "") -> None:
        if key and self._reading in self.missing:
            self.missing.note(self._reading, (key,), str(e))
        self.missing.warn_once(("cpu", str(e)), "cpu: %s; left out", e)

    # -- paths ---------------------------------------------------------------------

    def _sys(self, *parts: str) -> Path:
        return self.options.sysfs.joinpath(*parts)

    def _proc(self, *parts: str) -> Path:
        return self.options.procfs.joinpath(*parts)

    # -- discovery -------------------------------------------------------------------

    def _online_cpus(self) -> set[int]:
        cpu_dir = self._sys("devices", "system", "cpu")
        online = self._read(cpu_dir / "online")
        if online is not None:
            try:
                return parse_cpu_list(online, cpu_dir / "online")
            except FieldError as e:
                self._bad(e)
        # Without the online list every CPU directory counts; an offline CPU has no
        # topology there and drops out below.
        return {int(p.name[3:]) for p in cpu_dir.glob("cpu[0-9]*") if p.name[3:].isdigit()}

    def _node_cpus(self) -> dict[int, set[int]]:
        out: dict[int, set[int]] = {}
        for p in self._sys("devices", "system", "node").glob("node[0-9]*"):
            text = self._read(p / "cpulist")
            if p.name[4:].isdigit() and text is not None:
                try:
                    out[int(p.name[4:])] = parse_cpu_list(text, p / "cpulist")
                except FieldError as e:
                    self._bad(e)
        return out

    def _models(self) -> dict[int, str]:
        """CPU number -> "model name" from /proc/cpuinfo (absent on arm64)."""
        text = self._read(self._proc("cpuinfo"), limit=TABLE_LIMIT) or ""
        out: dict[int, str] = {}
        cpu: int | None = None
        for line in text.splitlines():
            key, _, value = line.partition(":")
            key = key.strip()
            if key == "processor":
                cpu = _number(value)
            elif key == "model name" and cpu is not None:
                out[cpu] = value.strip()
        return out

    def _machine_uuid(self) -> str | None:
        text = self._read(self._sys("class", "dmi", "id", "product_uuid"))
        if text is None:
            return None
        value = text.strip().lower()
        return value if value and value not in _PLACEHOLDER_UUIDS else None

    def discover(self) -> list[DeviceInfo]:
        cpus = self._online_cpus()
        if not cpus:
            raise BackendUnavailableError(
                f"no CPUs under {self._sys('devices', 'system', 'cpu')}; "
                "is --path.sysfs pointing at a sysfs mount?"
            )
        by_socket: dict[int, set[int]] = {}
        unplaced: set[int] = set()
        for cpu in cpus:
            package = self._read_int(
                self._sys(
                    "devices", "system", "cpu", f"cpu{cpu}", "topology", "physical_package_id"
                )
            )
            if package is None:
                unplaced.add(cpu)
                continue
            # Some arm64 firmware has no package information and the kernel says -1;
            # such a host is one socket as far as anyone can tell.
            by_socket.setdefault(max(package, 0), set()).add(cpu)
        if not by_socket:
            # No topology at all (a restricted sysfs): one socket holding every CPU is
            # the only true statement left.
            by_socket[0] = unplaced

        node_cpus = self._node_cpus()
        models = self._models()
        machine_uuid = self._machine_uuid()
        release = (self._read(self._proc("sys", "kernel", "osrelease")) or "").strip()

        socket_nodes = {
            s: tuple(sorted(n for n, nc in node_cpus.items() if nc & socket_cpus))
            for s, socket_cpus in by_socket.items()
        }
        all_nodes = [n for nodes in socket_nodes.values() for n in nodes]
        nodes_disjoint = len(all_nodes) == len(set(all_nodes)) and all(socket_nodes.values())
        if len(by_socket) == 1:
            memory_from = "host"
        elif nodes_disjoint:
            memory_from = "nodes"
        else:
            memory_from = ""
            log.info(
                "cpu: %d sockets share NUMA nodes (NUMA off in the firmware?); "
                "memory cannot be attributed to a socket and is left out",
                len(by_socket),
            )

        self._sockets = {}
        devices: list[DeviceInfo] = []
        for s in sorted(by_socket):
            socket_cpus = by_socket[s]
            name = f"cpu{s}"
            self._sockets[name] = _Socket(s, frozenset(socket_cpus), socket_nodes[s], memory_from)
            model = next((models[c] for c in sorted(socket_cpus) if c in models), "")
            # The uuid label should tell this socket apart from every other in the
            # fleet, as a GPU UUID does. The DMI product UUID names the machine, but
            # it is readable by root only on most kernels; without it the uuid is
            # unique within the host only, and the `node` label attached at scrape
            # time tells hosts apart.
            uuid = f"{machine_uuid}-socket{s}" if machine_uuid else f"cpu-socket{s}"
            devices.append(
                DeviceInfo(
                    device=name,
                    vendor="cpu",
                    uuid=uuid,
                    model=model,
                    driver_version=release,
                    numa_node=",".join(str(n) for n in socket_nodes[s]),
                )
            )
        return devices

    # -- reading ---------------------------------------------------------------------

    def read(self, device: DeviceInfo) -> Reading:
        sock = self._sockets[device.device]
        reading = Reading()
        self.missing.begin(device.device, {})
        self._reading = device.device
        stat = self._read(self._proc("stat"), "utilization", TABLE_LIMIT)
        if stat is not None:
            times = self._cpu_times(stat, sock.cpus)
            if not times:
                raise DeviceLostError(f"none of socket {sock.socket}'s CPUs is online")
            reading.utilization = self._utilization(sock, times)
        self._memory(sock, reading)
        reading.temperatures = self._temperatures(sock.socket)
        self._energy(sock, reading)
        return reading

    @staticmethod
    def _cpu_times(stat: str, cpus: frozenset[int]) -> dict[int, _CpuTimes]:
        out: dict[int, _CpuTimes] = {}
        for line in stat.splitlines():
            if not line.startswith("cpu") or line.startswith("cpu "):
                continue
            fields = line.split()
            cpu = _number(fields[0][3:])
            if cpu is None or cpu not in cpus:
                continue
            numbers = [_number(v) for v in fields[1:9]]
            values = [v for v in numbers if v is not None]
            if len(values) != len(numbers):
                continue
            # user nice system idle iowait irq softirq steal; guest and guest_nice
            # (fields 9 and 10) are already counted in user and nice. Steal counts as
            # busy: the hypervisor had the CPU, so it was not free for this host.
            values += [0] * (8 - len(values))
            total = sum(values)
            out[cpu] = _CpuTimes(busy=total - values[3] - values[4], total=total)
        return out

    @staticmethod
    def _utilization(sock: _Socket, times: dict[int, _CpuTimes]) -> float | None:
        busy = total = 0
        for cpu, now in times.items():
            before = sock.previous_times.get(cpu, _CpuTimes(0, 0))
            # idle and iowait can step backwards on NO_HZ kernels; a negative delta
            # is noise, not negative work.
            busy += max(now.busy - before.busy, 0)
            total += max(now.total - before.total, 0)
        sock.previous_times = times
        if total <= 0:
            return None
        return min(max(busy / total, 0.0), 1.0)

    def _memory(self, sock: _Socket, reading: Reading) -> None:
        host_text = self._read(self._proc("meminfo"), "memory_total_bytes", TABLE_LIMIT)
        host = _meminfo(host_text) if host_text is not None else {}
        if sock.memory_from == "host":
            total_kb = host.get("MemTotal")
            available_kb = host.get("MemAvailable")
            if total_kb is not None:
                reading.memory_total_bytes = float(total_kb * _KIB)
                if available_kb is not None:
                    reading.memory_used_bytes = float((total_kb - available_kb) * _KIB)
            return
        if sock.memory_from != "nodes":
            return
        nodes, every_node = self._node_meminfo()
        if any(n not in nodes or "MemTotal" not in nodes[n] for n in sock.nodes):
            return
        reading.memory_total_bytes = float(sum(nodes[n]["MemTotal"] for n in sock.nodes) * _KIB)
        estimates = {n: _node_reclaimable_kb(m) for n, m in nodes.items()}
        if any(estimates[n] is None for n in sock.nodes):
            return
        socket_estimate = sum(estimates[n] or 0 for n in sock.nodes)
        host_available = host.get("MemAvailable")
        host_estimate = sum(e for e in estimates.values() if e is not None)
        if host_available is not None and every_node and host_estimate > 0:
            # Scale the node estimates so that every node together gives the host's
            # MemAvailable: the kernel's reserves and watermarks are host-wide, and
            # the sockets should add up to what `free` says. Integer kB keeps the
            # figure exact.
            available_kb = socket_estimate * host_available // host_estimate
        else:
            available_kb = socket_estimate
        total_kb = sum(nodes[n]["MemTotal"] for n in sock.nodes)
        reading.memory_used_bytes = float(max(total_kb - available_kb, 0) * _KIB)

    def _node_meminfo(self) -> tuple[dict[int, dict[str, int]], bool]:
        """Every NUMA node's meminfo, and whether every node's could be read (the
        host's MemAvailable can be split only over all of them)."""
        out: dict[int, dict[str, int]] = {}
        every = True
        for p in self._sys("devices", "system", "node").glob("node[0-9]*"):
            if not p.name[4:].isdigit():
                continue
            text = self._read(p / "meminfo", "memory_total_bytes")
            if text is None:
                every = False
            else:
                out[int(p.name[4:])] = _meminfo(text)
        return out, every

    def _temperatures(self, socket: int) -> dict[str, float]:
        hwmons: list[tuple[Path, str]] = []
        for p in sorted(self._sys("class", "hwmon").glob("hwmon*")):
            driver = (self._read(p / "name") or "").strip()
            if driver in _HWMON_DRIVERS:
                hwmons.append((p, driver))
        amd = [p for p, driver in hwmons if driver != "coretemp"]
        out: dict[str, float] = {}
        for p, driver in hwmons:
            if driver == "coretemp":
                sensors = self._coretemp(p, socket)
            elif self._amd_socket(p, amd) == socket:
                sensors = self._amd_sensors(p)
            else:
                continue
            # Several dies of one socket (first-generation EPYC) each report their
            # own Tctl: the socket's figure is the hottest, the one that throttles.
            for sensor, celsius in sensors.items():
                out[sensor] = max(celsius, out.get(sensor, celsius))
        return out

    def _inputs(self, hwmon: Path) -> Iterable[tuple[str | None, Path]]:
        """(label, input file) of every temperature input; label None when
        unlabelled. Values are read only for the sensors that are kept: coretemp
        has one input per core, and a large socket has dozens."""
        for p in sorted(hwmon.glob("temp*_input")):
            label = self._read(p.with_name(p.name.replace("_input", "_label")))
            yield (label.strip() if label is not None else None), p

    def _celsius(self, path: Path) -> float | None:
        millidegrees = self._read_int(path, "temperatures")
        return millidegrees / 1000.0 if millidegrees is not None else None

    def _coretemp(self, hwmon: Path, socket: int) -> dict[str, float]:
        # coretemp has one hwmon per package and says which in the package label.
        for label, path in self._inputs(hwmon):
            m = _CORETEMP_PACKAGE.match(label or "")
            if m is None:
                continue
            celsius = self._celsius(path)
            if int(m.group(1)) != socket or celsius is None:
                return {}
            return {"package": celsius}
        return {}

    def _amd_socket(self, hwmon: Path, amd_hwmons: list[Path]) -> int | None:
        """The socket of a k10temp/zenpower hwmon, from the PCI device it binds to
        (data-fabric node N is device 0x18 + N; several nodes share a socket on
        first-generation EPYC)."""
        if len(self._sockets) == 1:
            return next(iter(self._sockets.values())).socket
        m = _AMD_DF_DEVICE.match(os.path.basename(os.path.realpath(hwmon / "device")))
        if m is None:
            return None
        node = int(m.group(1), 16) - 0x18
        nodes_per_socket = max(len(amd_hwmons) // max(len(self._sockets), 1), 1)
        index = node // nodes_per_socket
        sockets = sorted(s.socket for s in self._sockets.values())
        return sockets[index] if 0 <= index < len(sockets) else None

    def _amd_sensors(self, hwmon: Path) -> dict[str, float]:
        out: dict[str, float] = {}
        for label, path in self._inputs(hwmon):
            celsius = self._celsius(path)
            if celsius is None:
                continue
            # Before Linux 4.20 k10temp had one unlabelled input: Tctl.
            if label is None or label == "Tctl":
                out["package"] = celsius
                continue
            m = _AMD_SENSOR.match(label)
            name = m.group(1) if m else _sanitize(label)
            if name:
                out[name] = celsius
        return out

    def _energy(self, sock: _Socket, reading: Reading) -> None:
        zones = []
        for p in sorted(self._sys("class", "powercap").glob("intel-rapl:*")):
            if not _RAPL_ZONE.match(p.name):
                continue  # sub-zones (core, uncore, dram) are inside their package
            zone_name = (self._read(p / "name") or "").strip()
            m = _RAPL_PACKAGE.match(zone_name)
            # Without a name, zone N is package N.
            package = int(m.group(1)) if m else int(p.name.split(":")[1])
            if package == sock.socket:
                zones.append(p)
        if not zones:
            return
        total_uj = 0
        for p in zones:
            uj = self._zone_energy(p)
            if uj is None:
                # A package total with a die missing would be a lie; leave it out.
                return
            total_uj += uj
        joules = total_uj / 1e6
        now = self._clock()
        reading.energy_joules = joules
        if sock.previous_energy is not None:
            before_j, before_t = sock.previous_energy
            if now > before_t:
                reading.power_watts = max(joules - before_j, 0.0) / (now - before_t)
        sock.previous_energy = (joules, now)

    def _zone_energy(self, zone: Path) -> int | None:
        """The zone's energy in µJ since the exporter first read it (plus the
        counter's value then), carried across the counter's wraparound."""
        raw = self._read_int(zone / "energy_uj", "energy_joules")
        if raw is None:
            return None
        key = str(zone)
        state = self._rapl.get(key)
        if state is None:
            self._rapl[key] = _RaplZone(last_uj=raw, total_uj=raw)
            return raw
        delta = raw - state.last_uj
        if delta < 0:
            # The counter wrapped at max_energy_range_uj. More than one wrap between
            # two reads would take tens of minutes at full power, far longer than a
            # poll interval, so one wrap is all there can be.
            max_range = self._read_int(zone / "max_energy_range_uj", "energy_joules")
            if max_range is None:
                # Without the range this interval's energy is unknown: skip it, so
                # the total stays low rather than going backwards.
                state.last_uj = raw
                return state.total_uj
            delta += max_range
        state.last_uj = raw
        state.total_uj += max(delta, 0)
        return state.total_uj


def _node_reclaimable_kb(m: dict[str, int]) -> int | None:
    """What a NUMA node could give back: free pages, the file LRU and reclaimable
    kernel memory, the ingredients of the kernel's MemAvailable."""
    try:
        reclaimable = m["KReclaimable"] if "KReclaimable" in m else m["SReclaimable"]
        return m["MemFree"] + m["Active(file)"] + m["Inactive(file)"] + reclaimable
    except KeyError:
        return None


def _sanitize(label: str) -> str:
    return re.sub(r"[^a-z0-9]+", "_", label.lower()).strip("_")
