"""AMD GPUs through the amdgpu driver's own sysfs files, for hosts without AMD SMI.

Why it is built this way:

* Everything is read under ``--path.sysfs``: ``class/drm/card*/device``
  (``gpu_busy_percent``, ``mem_busy_percent``, ``mem_info_vram_*``, ``unique_id``,
  the binary ``gpu_metrics`` table, ``ras/*_err_count``) and the card's hwmon
  directory, so the tests run against a fixture tree.
* **Precedence.** A valid gpu_metrics value wins over ``gpu_busy_percent`` and hwmon:
  it is what those files are computed from on SMU-based GPUs, and it has what they lack
  (several temperatures, energy, xGMI traffic, throttling). The memory bandwidth figure
  is ``average_umc_activity`` (MI300: DRAM bandwidth utilisation); without gpu_metrics it
  is ``mem_busy_percent``, a busy-time fraction, and its HELP source says so. A table
  this backend cannot use is skipped for that card with one log line per card and
  reason; the other files still give that card's figures.
* **Throttling.** MI300's v1.4/v1.5 tables write 0 to ``throttle_status`` ("not
  reported through metrics now", smu_v13_0_6), so nothing is read from them: a 0 there
  is not "not throttled".
* **RAS events.** Each ``ras/<block>_err_count`` holds running ``ue``/``ce`` (and on
  newer kernels ``de``, deferred) counts. Their sums are the ECC counters; their
  growth is fault events (``exporter.backends.amd.device.ras_events``).
* **Unsupported is not zero.** A file that is missing, unreadable, out of range or an
  all-ones sentinel leaves its field out, with the reason in ``missing``. A 0 W socket
  power (the secondary die of an MI250 writes 0) is not a measurement either.
* **A lost GPU** (its sysfs directory vanished, or a read answered ENODEV) ends the
  read with ``DeviceLostError``; the poller keeps its identity with ``accel_up 0``.
* **A bad file is one bad field.** Every file goes through the bounded reader
  (``accel_common.readfile``): a ``gpu_metrics`` linked to a device or a FIFO, a file
  over its size cap, bytes that are not UTF-8 or a number no kernel attribute holds
  (400 digits) drop that field, with its reason in ``missing`` and one warning; the
  GPU keeps its identity and ``accel_up``. At discovery, an unusable identity file
  (``product_name``, ``unique_id``, ``numa_node``) leaves that part of the identity to
  its fallback (the model from the PCI id, the PCI address as uuid), never the GPU.

Sensor names are vendor-neutral: amdgpu's ``edge`` sensor is ``gpu`` (the die
temperature NVIDIA calls GPU), ``junction``/``hotspot`` is ``hotspot``, ``mem`` is
``memory``; gpu_metrics adds ``vr_gfx``, ``vr_soc``, ``vr_memory`` and ``hbm0``..``hbm3``.
"""

from __future__ import annotations

import errno
import logging
import os
import re
from pathlib import Path

from accel_common.readfile import BLOB_LIMIT, FieldError, parse_int, read_bytes, read_text
from exporter.backends.amd import partitions
from exporter.backends.amd.device import (
    PCI_VENDOR_AMD,
    VENDOR,
    Gpu,
    amdsmi_uuid,
    model_name,
    ras_events,
)
from exporter.backends.amd.gpu_metrics import (
    GpuMetrics,
    GpuMetricsError,
    indep_throttle,
    parse_gpu_metrics,
    percent,
    residency_throttle,
    xgmi_rates,
)
from exporter.backends.base import BackendOptions, MissingFields
from exporter.model import BackendUnavailableError, DeviceInfo, DeviceLostError, Reading
from exporter.pcitopo import cpu_affinity, numa_node_at

log = logging.getLogger("accel_exporter.amd")

UMC_SOURCE = "gpu_metrics average_umc_activity"
MEM_BUSY_SOURCE = "amdgpu mem_busy_percent (busy time, not bandwidth)"

# hwmon temp*_label -> sensor; an unlabelled temp1 is amdgpu's edge sensor.
HWMON_SENSORS: dict[str, str] = {"edge": "gpu", "junction": "hotspot", "mem": "memory"}
HWMON_CLOCKS: dict[str, str] = {"sclk": "graphics", "mclk": "memory"}

_CARD = re.compile(r"^card(\d+)$")
_PCI_ADDRESS = re.compile(r"^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$")
# At most 20 digits: a RAS count is a 64-bit counter, and a longer one is not a count.
_RAS_LINE = re.compile(r"^\s*(ue|ce|de)\s*:\s*(\d{1,20})\s*$")
# What amdgpu answers in a RAS count file while the GPU resets: normal, not worth a word.
_RAS_BUSY = "Query currently inaccessible"
_TEMP_INPUT = re.compile(r"^temp(\d+)_input$")
_FREQ_INPUT = re.compile(r"^freq(\d+)_input$")
# errno values that mean the device itself is gone, not that one file failed.
_LOST_ERRNOS = frozenset({errno.ENODEV, errno.ENXIO})


def read_quiet(path: Path) -> str | None:
    """The file's text, or None when it is absent or unusable (``readfile``'s bounds);
    for files whose absence or corruption only takes a fallback, such as a label."""
    try:
        return read_text(path)
    except FieldError:
        return None


def read_hex(path: Path) -> int | None:
    """A hex attribute (``0x74a1``) that fits in 64 bits; None otherwise."""
    text = read_quiet(path)
    try:
        return parse_int(text, 16) if text is not None else None
    except FieldError:
        return None


def numa_node(path: Path) -> str:
    """A ``numa_node`` file's node, empty when the platform does not say."""
    return numa_node_at(path)


def driver_version(options: BackendOptions) -> str:
    """amdgpu's version: DKMS (ROCm) builds of amdgpu publish a module version; the
    in-tree driver is the kernel's, so its version is the kernel release."""
    for path in (
        options.sysfs / "module" / "amdgpu" / "version",
        options.procfs / "sys" / "kernel" / "osrelease",
    ):
        text = (read_quiet(path) or "").strip()
        if text:
            return text
    return ""


def parse_ras(text: str) -> tuple[int, int, int] | None:
    """``ue: N\\nce: M`` (and ``de: K`` on ACA kernels) as (ue, ce, de)."""
    values: dict[str, int] = {}
    for line in text.splitlines():
        if not line.strip():
            continue
        m = _RAS_LINE.match(line)
        if m is None:
            return None
        values[m.group(1)] = int(m.group(2))
    if "ue" not in values or "ce" not in values:
        return None
    return values["ue"], values["ce"], values.get("de", 0)


class SysfsReader:
    """Discovers and reads the AMD GPUs that amdgpu publishes in sysfs."""

    def __init__(self, options: BackendOptions, missing: MissingFields) -> None:
        self.options = options
        self.missing = missing

    def discover(self, amdsmi_reason: str) -> list[Gpu]:
        """The AMD cards under ``class/drm`` in PCI bus order, each followed by its
        compute partitions; ``amdsmi_reason`` (why AMD SMI is not used) goes into the
        reason when there is none."""
        drm = self.options.sysfs / "class" / "drm"
        found: dict[str, tuple[int, str, Path]] = {}  # pci -> (card number, card, device dir)
        for entry in drm.glob("card*"):
            m = _CARD.match(entry.name)  # card0, not the connector card0-DP-1
            if m is None:
                continue
            device_dir = entry / "device"
            if read_hex(device_dir / "vendor") != PCI_VENDOR_AMD:
                continue
            pci = os.path.basename(os.path.realpath(device_dir)).lower()
            if not _PCI_ADDRESS.match(pci):
                pci = entry.name  # not a PCI device; still one GPU, named by its card
            number = int(m.group(1))
            if pci not in found or number < found[pci][0]:
                found[pci] = (number, entry.name, device_dir)
        if not found:
            raise BackendUnavailableError(
                f"no AMD GPU under {drm} (no card* with PCI vendor 0x1002); "
                f"AMD SMI not used: {amdsmi_reason}"
            )
        driver = driver_version(self.options)
        gpus: list[Gpu] = []
        for index, pci in enumerate(sorted(found)):
            _, card, device_dir = found[pci]
            device_id = read_hex(device_dir / "device")
            name = f"amd{index}"
            model = self._identity(name, device_dir / "product_name")
            if not model:
                model = model_name(device_id)
            serial_text = self._identity(name, device_dir / "unique_id")
            try:
                serial = parse_int(serial_text, 16) if serial_text else None
            except FieldError as e:
                self._bad_identity(name, e)
                serial = None
            if serial is not None and device_id is not None:
                uuid = amdsmi_uuid(serial, device_id)
            else:
                # Without the ASIC serial the PCI address is the one stable name left.
                uuid = pci
            info = DeviceInfo(
                device=name,
                vendor=VENDOR,
                uuid=uuid,
                model=model,
                pci_bus_id=pci if _PCI_ADDRESS.match(pci) else "",
                driver_version=driver,
                numa_node=numa_node(device_dir / "numa_node"),
                cpu_affinity=cpu_affinity(self.options.sysfs, pci),
            )
            gpus.append(Gpu(info, device_dir=device_dir, card=card))
            gpus.extend(partitions.children(self.options.sysfs, info, device_dir, self.missing))
        return gpus

    def _identity(self, device: str, path: Path) -> str:
        """An identity file's text, stripped; empty when absent, and empty with one
        warning when unusable, so the caller's fallback names the GPU."""
        try:
            return read_text(path).strip()
        except FieldError as e:
            if not e.absent:
                self._bad_identity(device, e)
            return ""

    def _bad_identity(self, device: str, e: FieldError) -> None:
        self.missing.warn_once(
            (device, str(e)), "%s: cannot read %s: %s; a fallback is used", device, e.path, e.reason
        )

    def read(self, gpu: Gpu) -> Reading:
        device_dir = gpu.device_dir
        assert device_dir is not None
        if not device_dir.is_dir():
            raise DeviceLostError(f"{gpu.card} ({gpu.info.pci_bus_id}) left sysfs")
        r = Reading()
        missing = self.missing[gpu.name]
        busy = self._file_int(gpu, device_dir / "gpu_busy_percent", "utilization")
        r.utilization = percent(busy)
        mem_busy = percent(
            self._file_int(gpu, device_dir / "mem_busy_percent", "memory_bandwidth_utilization")
        )
        total = self._file_int(gpu, device_dir / "mem_info_vram_total", "memory_total_bytes")
        used = self._file_int(gpu, device_dir / "mem_info_vram_used", "memory_used_bytes")
        if total:
            r.memory_total_bytes = float(total)
            if used is not None:
                r.memory_used_bytes = float(used)
        self._ras(gpu, r)
        self._hwmon(gpu, r)
        metrics = self._gpu_metrics(gpu)
        if metrics is not None:
            self._apply_metrics(gpu, r, metrics)
        if r.memory_bandwidth_utilization is None and mem_busy is not None:
            r.memory_bandwidth_utilization = mem_busy
            r.memory_bandwidth_source = MEM_BUSY_SOURCE
        if r.memory_bandwidth_utilization is None:
            missing.setdefault(
                "memory_bandwidth_utilization",
                "neither gpu_metrics average_umc_activity nor mem_busy_percent",
            )
        return r

    def _file(
        self, gpu: Gpu, path: Path, binary: bool = False, key: str = ""
    ) -> str | bytes | None:
        """One sysfs file of the card: None when it is missing or unreadable (the reason
        kept under ``key`` in ``missing``); DeviceLostError when the card itself is gone."""
        try:
            return read_bytes(path, BLOB_LIMIT) if binary else read_text(path)
        except FieldError as e:
            if e.absent:
                if gpu.device_dir is not None and not gpu.device_dir.is_dir():
                    raise DeviceLostError(
                        f"{gpu.card} ({gpu.info.pci_bus_id}) left sysfs"
                    ) from None
                return None
            if e.errno in _LOST_ERRNOS:
                raise DeviceLostError(f"{path.name}: {os.strerror(e.errno or 0)}") from e
            # EPERM during a GPU reset, EINVAL or EOPNOTSUPP where the ASIC has no such
            # sensor, or a file no driver writes (a device node, 400 digits, not text):
            # this field is out for this poll, the rest is still read.
            self._note(gpu, path.name, e.reason, key)
            return None

    def _file_int(self, gpu: Gpu, path: Path, key: str = "") -> int | None:
        text = self._file(gpu, path, key=key)
        if not isinstance(text, str):
            return None
        try:
            return parse_int(text)
        except FieldError as e:
            self._note(gpu, path.name, e.reason, key)
            return None

    def _note(self, gpu: Gpu, what: str, reason: str, key: str = "") -> None:
        if key:
            self.missing.note(gpu.name, (key,), f"{what}: {reason}")
        self.missing.warn_once(
            (gpu.name, f"{what}: {reason}"),
            "%s (%s): cannot read %s: %s",
            gpu.name,
            gpu.card,
            what,
            reason,
        )

    def _ras(self, gpu: Gpu, r: Reading) -> None:
        assert gpu.device_dir is not None
        files = sorted((gpu.device_dir / "ras").glob("*_err_count"))
        if not files:
            self.missing[gpu.name]["ecc_errors"] = "no ras/*_err_count files (RAS not enabled)"
            return
        counts: dict[str, tuple[int, int, int]] = {}
        complete = True
        for f in files:
            block = f.name[: -len("_err_count")]
            text = self._file(gpu, f, key="ecc_errors")
            parsed = parse_ras(text) if isinstance(text, str) else None
            if parsed is None and isinstance(text, str) and _RAS_BUSY not in text:
                self._note(gpu, f.name, "not ue/ce counts", "ecc_errors")
            if parsed is None:
                # "Query currently inaccessible" during a reset, or unreadable: a sum
                # without this block would step the counter down, so ECC waits a poll.
                complete = False
                continue
            counts[block] = parsed
        if complete:
            r.ecc_errors = {
                "uncorrected": float(sum(ue for ue, _, _ in counts.values())),
                "corrected": float(sum(ce for _, ce, _ in counts.values())),
            }
        else:
            self.missing[gpu.name].setdefault(
                "ecc_errors", "a RAS block could not be read this poll"
            )
        r.fault_events.extend(ras_events(gpu.ras_previous, counts))
        gpu.ras_previous.update(counts)

    def _hwmon(self, gpu: Gpu, r: Reading) -> None:
        assert gpu.device_dir is not None
        hwmons = sorted((gpu.device_dir / "hwmon").glob("hwmon*"))
        if not hwmons:
            return
        hw = hwmons[0]
        try:
            names = sorted(p.name for p in hw.iterdir())
        except OSError:
            return  # the hwmon device went away between the glob and the listing
        for name in names:
            m = _TEMP_INPUT.match(name)
            if m is None:
                continue
            label = self._label(gpu, hw / f"temp{m.group(1)}_label")
            sensor = HWMON_SENSORS.get(label) or ("gpu" if not label and m.group(1) == "1" else "")
            if not sensor:
                continue
            millidegrees = self._file_int(gpu, hw / name, "temperatures")
            if millidegrees is not None:
                r.temperatures[sensor] = millidegrees / 1000.0
        for attr in ("power1_average", "power1_input"):
            if attr in names:
                uw = self._file_int(gpu, hw / attr, "power_watts")
                if uw:
                    r.power_watts = uw / 1e6
                    break
        if "power1_cap" in names:
            cap = self._file_int(gpu, hw / "power1_cap", "power_limit_watts")
            if cap:
                r.power_limit_watts = cap / 1e6
        if "energy1_input" in names:
            # The hwmon ABI's energy counter (µJ); amdgpu itself publishes none as of
            # Linux 6.x, so on AMD GPUs energy normally comes from gpu_metrics.
            uj = self._file_int(gpu, hw / "energy1_input", "energy_joules")
            if uj:
                r.energy_joules = uj / 1e6
        for name in names:
            m = _FREQ_INPUT.match(name)
            if m is None:
                continue
            label = self._label(gpu, hw / f"freq{m.group(1)}_label")
            clock = HWMON_CLOCKS.get(label)
            hz = self._file_int(gpu, hw / name, f"clocks_hz.{clock}") if clock else None
            if clock and hz:
                r.clocks_hz[clock] = float(hz)

    def _label(self, gpu: Gpu, path: Path) -> str:
        """An hwmon ``*_label``, lower case; empty when absent or unusable."""
        text = self._file(gpu, path)
        return text.strip().lower() if isinstance(text, str) else ""

    def _gpu_metrics(self, gpu: Gpu) -> GpuMetrics | None:
        assert gpu.device_dir is not None
        path = gpu.device_dir / "gpu_metrics"
        data = self._file(gpu, path, binary=True, key="throttle")
        if not isinstance(data, bytes):
            missing = self.missing[gpu.name]
            why = missing.get("throttle", "no gpu_metrics file")
            for key in ("throttle", "link_bytes_per_second"):
                missing[key] = why
            return None
        try:
            return parse_gpu_metrics(data)
        except GpuMetricsError as e:
            reason = str(e)
            for key in ("throttle", "link_bytes_per_second"):
                self.missing[gpu.name][key] = f"gpu_metrics skipped: {reason}"
            self.missing.warn_once(
                (gpu.name, f"gpu_metrics: {reason}"),
                "%s (%s): gpu_metrics skipped: %s; figures come from the other sysfs files",
                gpu.name,
                gpu.card,
                reason,
            )
            return None

    def _apply_metrics(self, gpu: Gpu, r: Reading, m: GpuMetrics) -> None:
        """gpu_metrics values over the busy-percent and hwmon ones, where valid."""
        missing = self.missing[gpu.name]
        if m.utilization is not None:
            r.utilization = m.utilization
        if m.memory_activity is not None:
            r.memory_bandwidth_utilization = m.memory_activity
            r.memory_bandwidth_source = UMC_SOURCE
        r.temperatures.update(m.temperatures)
        if m.power_watts is not None:
            r.power_watts = m.power_watts
        if m.energy_joules is not None:
            r.energy_joules = m.energy_joules
        r.clocks_hz.update(m.clocks_hz)
        before = gpu.metrics_previous
        gpu.metrics_previous = m
        if m.indep_throttle_status is not None:
            r.throttle = indep_throttle(m.indep_throttle_status)
        elif m.residencies:
            r.throttle, why = residency_throttle(before, m)
            if why:
                missing["throttle"] = why
        else:
            # v1.1/v1.2 have only the ASIC-dependent bits; MI300's v1.4/v1.5 write 0.
            missing["throttle"] = (
                f"gpu_metrics v{m.revision[0]}.{m.revision[1]} has no ASIC-independent "
                "throttle status"
            )
        r.link_bytes_per_second, why = xgmi_rates(before, m)
        if why:
            missing["link_bytes_per_second"] = why
