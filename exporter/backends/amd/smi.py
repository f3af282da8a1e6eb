"""AMD GPUs through AMD SMI (the ``amdsmi`` module of ROCm), when it imports and
initialises with at least one GPU.

Why it is built this way:

* **The amdsmi import is guarded, and quiet.** Without ROCm, ``import amdsmi`` raises
  ``KeyError`` (not ImportError) after *printing* the loader's error to stdout, which
  would corrupt ``--once`` output. ``load_amdsmi`` imports it with both Python's
  ``sys.stdout`` and file descriptor 1 redirected, and turns what was printed into the
  reason it logs.
* **Answers that cannot change** while the driver is loaded (``NOT_SUPPORTED``, no
  permission) are remembered per GPU, so such a field is not asked again and nothing
  is logged for it; other failures leave the field out for this poll, logged once.
* **A lost GPU** (AMD SMI answered NOT_FOUND, or failed while its PCI function left
  sysfs) ends the read with ``DeviceLostError``.
* The ``gpu_metrics`` dict the library returns is turned into the same
  ``GpuMetrics`` as a parsed sysfs table, so throttle residencies and xGMI rates are
  computed by one code for both sources.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from exporter.backends.amd import procs
from exporter.backends.amd.device import VENDOR, Gpu, hex_or_none, model_name, ras_events
from exporter.backends.amd.gpu_metrics import (
    RESIDENCY_THROTTLE,
    GpuMetrics,
    percent,
    residency_throttle,
    xgmi_rates,
)
from exporter.backends.amd.sysfs import driver_version, numa_node
from exporter.backends.base import BackendOptions, MissingFields
from exporter.model import DeviceInfo, DeviceLostError, Reading
from exporter.pcitopo import cpu_affinity

log = logging.getLogger("accel_exporter.amd")

AMDSMI_UMC_SOURCE = "AMD SMI umc_activity"

_QUIET_LOCK = threading.Lock()


@contextlib.contextmanager
def quiet_stdout() -> Iterator[list[str]]:
    """Runs the body with ``sys.stdout`` and file descriptor 1 (where a C library
    writes) both redirected; yields a list that holds what was printed, once the body
    has finished. ``--once`` prints the exposition on stdout, so nothing else may."""
    printed: list[str] = []
    with _QUIET_LOCK, tempfile.TemporaryFile(mode="w+b") as c_out:
        captured = io.StringIO()
        saved = _redirect_fd1(c_out.fileno())
        try:
            with contextlib.redirect_stdout(captured):
                yield printed
        finally:
            _restore_fd1(saved)
            c_out.seek(0)
            text = captured.getvalue() + c_out.read().decode(errors="replace")
            printed.extend(line.strip() for line in text.splitlines() if line.strip())


def load_amdsmi() -> tuple[Any | None, str]:
    """Imports ``amdsmi`` without letting it write to stdout: ``(module, "")``, or
    ``(None, reason)`` with what it printed folded into the reason.

    Without ROCm its wrapper prints the loader's error and then fails with KeyError
    (not ImportError); any exception counts as "not available"."""
    module: Any | None = None
    reason = ""
    with quiet_stdout() as printed:
        try:
            import amdsmi

            module = amdsmi
        except Exception as e:
            reason = f"{type(e).__name__}: {e}"
    if module is None:
        said = " ".join(printed)
        reason = f"import amdsmi failed ({reason})" + (f": {said}" if said else "")
    return module, reason


def _redirect_fd1(target: int) -> int | None:
    with contextlib.suppress(OSError, ValueError, AttributeError):  # sys.stdout may be None
        sys.stdout.flush()
    try:
        saved = os.dup(1)
    except OSError:
        return None  # no fd 1 at all: nothing to protect
    os.dup2(target, 1)
    return saved


def _restore_fd1(saved: int | None) -> None:
    if saved is None:
        return
    os.dup2(saved, 1)
    os.close(saved)


class SmiReader:
    """One initialised AMD SMI library: discovers its GPUs, reads them, shuts down."""

    def __init__(
        self,
        smi: Any,
        options: BackendOptions,
        missing: MissingFields,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.smi = smi
        self.options = options
        self.missing = missing
        # The wall time of each process-list read: engine time per process is a
        # running total, and its increase is divided by the time between reads.
        self.clock = clock
        self._initialized = False

    def discover(self) -> tuple[list[Gpu], str]:
        """Initialises the library and lists its GPUs in PCI bus order; or no GPU and
        why AMD SMI is not a source here (it is then shut down again)."""
        smi = self.smi
        failure = ""
        with quiet_stdout() as printed:  # the C library may print as it looks for GPUs
            try:
                smi.amdsmi_init(smi.AmdSmiInitFlags.INIT_AMD_GPUS)
            except Exception as e:
                failure = f"amdsmi_init failed: {_smi_error(smi, e)}"
        if printed:
            log.debug("amd: amdsmi_init printed: %s", " ".join(printed))
        if failure:
            return [], failure
        self._initialized = True
        try:
            handles = list(smi.amdsmi_get_processor_handles())
            if not handles:
                self.close()
                return [], "AMD SMI found no GPU"
            found: list[tuple[str, Any]] = []
            for handle in handles:
                bdf = str(smi.amdsmi_get_gpu_device_bdf(handle)).strip().lower()
                found.append((bdf, handle))
            found.sort(key=lambda t: t[0])
            gpus = [
                Gpu(self._identity(smi, index, bdf, handle), handle=handle)
                for index, (bdf, handle) in enumerate(found)
            ]
            return gpus, ""
        except Exception as e:
            # A library that initialises but cannot name its GPUs is not a source.
            self.close()
            return [], f"AMD SMI could not list its GPUs: {_smi_error(smi, e)}"

    def _identity(self, smi: Any, index: int, bdf: str, handle: Any) -> DeviceInfo:
        uuid = str(smi.amdsmi_get_gpu_device_uuid(handle))
        model = ""
        try:
            asic = smi.amdsmi_get_gpu_asic_info(handle)
            market = str(asic.get("market_name", "")).strip()
            model = "" if market in ("", "N/A") else market
            if not model:
                model = model_name(hex_or_none(asic.get("device_id")))
        except smi.AmdSmiException as e:
            log.debug("amd%d: no ASIC info: %s", index, _smi_error(smi, e))
        driver = ""
        try:
            version = str(smi.amdsmi_get_gpu_driver_info(handle).get("driver_version", ""))
            driver = "" if version == "N/A" else version
        except smi.AmdSmiException as e:
            log.debug("amd%d: no driver info: %s", index, _smi_error(smi, e))
        return DeviceInfo(
            device=f"amd{index}",
            vendor=VENDOR,
            uuid=uuid or bdf,
            model=model,
            pci_bus_id=bdf,
            driver_version=driver or driver_version(self.options),
            numa_node=numa_node(self.options.sysfs / "bus" / "pci" / "devices" / bdf / "numa_node"),
            cpu_affinity=cpu_affinity(self.options.sysfs, bdf),
        )

    def read(self, gpu: Gpu) -> Reading:
        # One family of fields at a time, in the order AMD SMI is asked: a lost GPU
        # ends the read at the first call that finds it gone.
        r = Reading()
        self._read_activity(gpu, r)
        self._read_memory_ecc(gpu, r)
        self._read_temperatures(gpu, r)
        self._read_power(gpu, r)
        self._read_clocks(gpu, r)
        self._read_metrics_table(gpu, r)
        if hasattr(self.smi, "amdsmi_get_gpu_process_list"):  # an older amdsmi may lack it
            procs.read(
                lambda: self._smi_call(gpu, "processes", "amdsmi_get_gpu_process_list", gpu.handle),
                gpu,
                r,
                self.clock(),
            )
            self.missing[gpu.name].pop("processes", None)  # not a catalogue field
        return r

    def _read_activity(self, gpu: Gpu, r: Reading) -> None:
        """Busy percentages: the graphics engine's and the memory controller's."""
        activity = self._smi_call(
            gpu,
            ("utilization", "memory_bandwidth_utilization"),
            "amdsmi_get_gpu_activity",
            gpu.handle,
        )
        if activity is not None:
            r.utilization = _smi_percent(activity.get("gfx_activity"))
            umc = _smi_percent(activity.get("umc_activity"))
            if umc is not None:
                r.memory_bandwidth_utilization = umc
                r.memory_bandwidth_source = AMDSMI_UMC_SOURCE

    def _read_memory_ecc(self, gpu: Gpu, r: Reading) -> None:
        """VRAM size and use, and the ECC counts, whose rises are fault events."""
        h, vram = gpu.handle, self.smi.AmdSmiMemoryType.VRAM
        total = self._smi_call(gpu, "memory_total_bytes", "amdsmi_get_gpu_memory_total", h, vram)
        used = self._smi_call(gpu, "memory_used_bytes", "amdsmi_get_gpu_memory_usage", h, vram)
        if _smi_number(total):
            r.memory_total_bytes = float(total)
            if _smi_number(used) is not None:
                r.memory_used_bytes = float(used)
        ecc = self._smi_call(gpu, "ecc_errors", "amdsmi_get_gpu_total_ecc_count", h)
        if ecc is not None:
            ce = _smi_number(ecc.get("correctable_count"))
            ue = _smi_number(ecc.get("uncorrectable_count"))
            de = _smi_number(ecc.get("deferred_count"))
            if ce is not None and ue is not None:
                r.ecc_errors = {"corrected": float(ce), "uncorrected": float(ue)}
                counts = {"total": (int(ue), int(ce), int(de or 0))}
                r.fault_events.extend(ras_events(gpu.ras_previous, counts))
                gpu.ras_previous.update(counts)

    def _read_temperatures(self, gpu: Gpu, r: Reading) -> None:
        """Three sensors, each asked on its own; missing only when all are."""
        smi, missing = self.smi, self.missing[gpu.name]
        no_temperature: list[str] = []
        for sensor, kind in (("gpu", "EDGE"), ("hotspot", "HOTSPOT"), ("memory", "VRAM")):
            key = f"temperatures.{sensor}"
            c = self._smi_call(
                gpu,
                key,
                "amdsmi_get_temp_metric",
                gpu.handle,
                smi.AmdSmiTemperatureType[kind],
                smi.AmdSmiTemperatureMetric.CURRENT,
            )
            if _smi_number(c) is not None:
                r.temperatures[sensor] = float(c)
            # Per-sensor keys steer the NOT_SUPPORTED memo; only the family is reported.
            reason = missing.pop(key, "")
            if reason:
                no_temperature.append(f"{kind}: {reason}")
        if not r.temperatures and no_temperature:
            missing["temperatures"] = "; ".join(no_temperature)

    def _read_power(self, gpu: Gpu, r: Reading) -> None:
        """Power drawn, its cap, and the energy counter."""
        h = gpu.handle
        power = self._smi_call(gpu, "power_watts", "amdsmi_get_power_info", h)
        if power is not None:
            # MI300 and newer report current_socket_power; older GPUs the average. 0
            # (secondary die) and 0xFFFF (the library's N/A) are not measurements.
            for key in ("current_socket_power", "average_socket_power"):
                w = _smi_number(power.get(key))
                if w and w < 0xFFFF:
                    r.power_watts = float(w)
                    break
        cap = self._smi_call(gpu, "power_limit_watts", "amdsmi_get_power_cap_info", h)
        if cap is not None:
            uw = _smi_number(cap.get("power_cap"))
            if uw:
                r.power_limit_watts = uw / 1e6
        energy = self._smi_call(gpu, "energy_joules", "amdsmi_get_energy_count", h)
        if energy is not None:
            ticks = _smi_number(energy.get("energy_accumulator"))
            resolution = _smi_number(energy.get("counter_resolution"))
            if ticks and resolution:
                r.energy_joules = ticks * resolution / 1e6  # resolution is in µJ

    def _read_clocks(self, gpu: Gpu, r: Reading) -> None:
        for clock, kind in (("graphics", "GFX"), ("memory", "MEM")):
            info = self._smi_call(
                gpu,
                f"clocks_hz.{clock}",
                "amdsmi_get_clock_info",
                gpu.handle,
                self.smi.AmdSmiClkType[kind],
            )
            mhz = _smi_number(info.get("clk")) if info is not None else None
            if mhz:
                r.clocks_hz[clock] = mhz * 1e6

    def _read_metrics_table(self, gpu: Gpu, r: Reading) -> None:
        """Throttle residencies and xGMI rates: differences between this poll's
        gpu_metrics table and the last one."""
        missing = self.missing[gpu.name]
        table = self._smi_call(
            gpu, ("throttle", "link_bytes_per_second"), "amdsmi_get_gpu_metrics_info", gpu.handle
        )
        if table is not None:
            m = _metrics_from_amdsmi(table)
            before = gpu.metrics_previous
            gpu.metrics_previous = m
            r.throttle, why = residency_throttle(before, m)
            if why:
                # indep_throttle_status comes through the Python API as one bool, which
                # names no reason; only the residencies (MI300+) do.
                missing["throttle"] = why
            r.link_bytes_per_second, why = xgmi_rates(before, m)
            if why:
                missing["link_bytes_per_second"] = why

    def _smi_call(self, gpu: Gpu, keys: str | tuple[str, ...], fn: str, *args: Any) -> Any:
        """One AMD SMI call for the fields ``keys``: its value, or None with the reason
        recorded. A GPU that is gone raises DeviceLostError."""
        smi = self.smi
        keys = (keys,) if isinstance(keys, str) else keys
        if all(k in gpu.static for k in keys):
            return None
        try:
            return getattr(smi, fn)(*args)
        except smi.AmdSmiLibraryException as e:
            code = _error_code(e)
            status = _status_name(smi, code)
            if code == _status(smi, "NOT_FOUND") or (
                code not in _statuses(smi, *_SMI_STATIC, *_SMI_QUIET) and self._pci_gone(gpu)
            ):
                raise DeviceLostError(f"{fn}: {status}") from e
            static = gpu.static if code in _statuses(smi, *_SMI_STATIC) else None
            self.missing.note(gpu.name, keys, f"{fn}: {status}", static)
            if code not in _statuses(smi, *_SMI_STATIC, *_SMI_QUIET):
                self._once(gpu, fn, status)
            return None
        except smi.AmdSmiException as e:
            self.missing.note(gpu.name, keys, f"{fn}: {type(e).__name__}")
            self._once(gpu, fn, f"{type(e).__name__}: {e}")
            return None

    def _once(self, gpu: Gpu, fn: str, reason: str) -> None:
        self.missing.warn_once(
            (gpu.name, f"{fn}: {reason}"), "%s: AMD SMI %s failed: %s", gpu.name, fn, reason
        )

    def _pci_gone(self, gpu: Gpu) -> bool:
        """Whether the GPU's PCI function left sysfs (only when sysfs can tell)."""
        devices = self.options.sysfs / "bus" / "pci" / "devices"
        return (
            bool(gpu.info.pci_bus_id)
            and devices.is_dir()
            and not (devices / gpu.info.pci_bus_id).exists()
        )

    def close(self) -> None:
        if self._initialized:
            try:
                self.smi.amdsmi_shut_down()
            except Exception as e:  # shutting down: nothing useful to do with it
                log.debug("amdsmi_shut_down: %s", e)
        self._initialized = False


# AMD SMI answers that stay true while the driver is loaded, and ones that are normal
# at times (the GPU is busy or resetting): neither is logged.
_SMI_STATIC = ("NOT_SUPPORTED", "NOT_YET_IMPLEMENTED", "NO_PERM")
_SMI_QUIET = ("NO_DATA", "BUSY", "RETRY", "TIMEOUT", "INTERRUPT")
# Fallbacks for the amdsmi_wrapper constants, as amdsmi.h numbers them.
_STATUS_NUMBERS = {
    "NOT_SUPPORTED": 2,
    "NOT_YET_IMPLEMENTED": 3,
    "TIMEOUT": 8,
    "RETRY": 9,
    "NO_PERM": 10,
    "INTERRUPT": 11,
    "BUSY": 30,
    "NOT_FOUND": 31,
    "NO_DATA": 40,
}


def _status(smi: Any, name: str) -> int:
    wrapper = getattr(smi, "amdsmi_wrapper", None)
    return int(getattr(wrapper, f"AMDSMI_STATUS_{name}", _STATUS_NUMBERS.get(name, -1)))


def _statuses(smi: Any, *names: str) -> tuple[int, ...]:
    return tuple(_status(smi, n) for n in names)


def _status_name(smi: Any, code: int | None) -> str:
    wrapper = getattr(smi, "amdsmi_wrapper", None)
    for k, v in vars(wrapper).items() if wrapper is not None else ():
        if k.startswith("AMDSMI_STATUS_") and v == code:
            return str(k)
    return f"AMD SMI status {code}"


def _error_code(e: Exception) -> int | None:
    getter = getattr(e, "get_error_code", None)
    code = getter() if callable(getter) else getattr(e, "err_code", None)
    return int(code) if isinstance(code, int) else None


def _smi_error(smi: Any, e: Exception) -> str:
    code = _error_code(e)
    return _status_name(smi, code) if code is not None else f"{type(e).__name__}: {e}"


def _smi_number(value: Any) -> float | None:
    """An AMD SMI value, None for its "N/A" (and anything else that is not a number)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def _smi_percent(value: Any) -> float | None:
    return percent(_smi_number(value))


def _metrics_from_amdsmi(table: dict[str, Any]) -> GpuMetrics:
    """The parts of amdsmi_get_gpu_metrics_info's dict that the rates need, in the same
    shape as a parsed sysfs table (the library says "N/A" where sysfs has all-ones)."""

    def number(key: str) -> int | None:
        v = _smi_number(table.get(key))
        return None if v is None else int(v)

    def numbers(key: str) -> tuple[int | None, ...]:
        values = table.get(key)
        if not isinstance(values, list):
            return ()
        return tuple(None if (n := _smi_number(v)) is None else int(n) for v in values)

    names = ["accumulation_counter", *(acc for _, acc in RESIDENCY_THROTTLE)]
    values = {n: number(n) for n in names}
    residencies = (
        {n: v for n, v in values.items() if v is not None}
        if all(v is not None for v in values.values())
        else {}
    )
    return GpuMetrics(
        revision=(
            number("common_header.format_revision") or 0,
            number("common_header.content_revision") or 0,
        ),
        residencies=residencies,
        xgmi_link_width=number("xgmi_link_width"),
        xgmi_read_kb=numbers("xgmi_read_data_acc"),
        xgmi_write_kb=numbers("xgmi_write_data_acc"),
        timestamp_ns=number("system_clock_counter"),
    )
