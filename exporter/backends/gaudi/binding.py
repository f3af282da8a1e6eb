"""HLML through Intel's Python binding, ``pyhlml`` (the ``habana-pyhlml`` distribution),
where it is installed: the same calls as ``exporter.backends.gaudi.hlml``, so the
backend does not know which it talks to.

Why it is built this way:

* The binding comes with the Gaudi software stack and follows its releases, so where
  it imports it is the first choice; ctypes on ``libhlml.so`` is the fallback.
* Its functions live in ``pyhlml.main`` (the package's ``__init__`` is empty from the
  1.2x releases on). A failed call raises ``HLMLError`` whose ``value`` is HLML's
  return code; each is turned into ``HlmlError`` with the C function's name, so the
  backend decides what it means as for the ctypes path.
* The archived GitHub release of the binding does not raise on a failed call (its
  ``check_return`` builds the error and drops it), so every failure would read as a
  row of zeros. ``usable`` probes ``check_return`` once; such a binding is passed over
  for ctypes, with the reason logged.
* The binding loads ``/usr/lib/habanalabs/libhlml.so`` itself, printing to stdout
  when it cannot; that print is kept out of the exporter's output, and the failure
  becomes the backend's one reason.
"""

from __future__ import annotations

import contextlib
import ctypes
import io
import logging
from typing import Any

from exporter.backends.gaudi import hlml
from exporter.backends.gaudi.hlml import Hlml, HlmlError

log = logging.getLogger("accel_exporter.gaudi")


def load() -> Any | None:
    """``pyhlml.main`` when it imports and raises on failed calls; else None."""
    try:
        from pyhlml import main  # type: ignore[import-not-found,unused-ignore]
    except Exception as e:  # not installed, or broken: ctypes it is
        log.debug("pyhlml not used: %s", e)
        return None
    return main if usable(main) else None


def usable(module: Any) -> bool:
    """Whether the binding's ``check_return`` raises on an error code."""
    try:
        module.check_return(hlml.ERROR_UNKNOWN)
    except Exception:
        return True
    log.warning("pyhlml does not raise on failed HLML calls (an archived release); using ctypes")
    return False


def _text(raw: Any) -> str:
    data = raw if isinstance(raw, bytes) else str(raw).encode()
    return data.split(b"\0", 1)[0].decode("utf-8", "replace").strip()


class Pyhlml(Hlml):
    """HLML's calls through ``pyhlml.main``, with ``Hlml``'s signatures."""

    def __init__(self, module: Any) -> None:
        super().__init__(None)
        self._mod = module
        self._error: type[BaseException] = getattr(module, "HLMLError", Exception)

    def _py(self, c_name: str, name: str, *args: Any) -> Any:
        fn = getattr(self._mod, name, None)
        if fn is None:  # an older binding without this call
            raise HlmlError(c_name, hlml.FUNCTION_NOT_FOUND)
        try:
            return fn(*args)
        except self._error as e:
            raise HlmlError(c_name, int(getattr(e, "value", hlml.ERROR_UNKNOWN))) from None

    def _dev(self, c_name: str, name: str, h: int, *args: Any) -> Any:
        return self._py(c_name, name, ctypes.c_void_p(h), *args)

    # -- library --------------------------------------------------------------

    def init(self) -> None:
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            self._py("hlml_init", "hlmlInit")

    def shutdown(self) -> None:
        self._py("hlml_shutdown", "hlmlShutdown")

    def driver_version(self) -> str:
        return _text(self._py("hlml_get_driver_version", "hlmlGetDriverVersion"))

    def device_count(self) -> int:
        return int(self._py("hlml_device_get_count", "hlmlDeviceGetCount"))

    def handle(self, index: int) -> int:
        h = self._py("hlml_device_get_handle_by_index", "hlmlDeviceGetHandleByIndex", index)
        return int(getattr(h, "value", h) or 0)

    # -- identity -------------------------------------------------------------

    def name(self, h: int) -> str:
        return _text(self._dev("hlml_device_get_name", "hlmlDeviceGetName", h))

    def uuid(self, h: int) -> str:
        return _text(self._dev("hlml_device_get_uuid", "hlmlDeviceGetUUID", h))

    def serial(self, h: int) -> str:
        return _text(self._dev("hlml_device_get_serial", "hlmlDeviceGetSerial", h))

    def pci_bus_id(self, h: int) -> str:
        info = self._dev("hlml_device_get_pci_info", "hlmlDeviceGetPCIInfo", h)
        return _text(info.bus_id)

    # -- telemetry ------------------------------------------------------------

    def utilization(self, h: int) -> int:
        u = self._dev("hlml_device_get_utilization_rates", "hlmlDeviceGetUtilizationRates", h)
        # A structure from the 1.2x releases, the percentage itself from older ones.
        return int(getattr(u, "aip", u))

    def memory(self, h: int) -> tuple[int, int]:
        m = self._dev("hlml_device_get_memory_info", "hlmlDeviceGetMemoryInfo", h)
        return int(m.used), int(m.total)

    def temperature(self, h: int, sensor: int) -> int:
        return int(self._dev("hlml_device_get_temperature", "hlmlDeviceGetTemperature", h, sensor))

    def power_mw(self, h: int) -> int:
        return int(self._dev("hlml_device_get_power_usage", "hlmlDeviceGetPowerUsage", h))

    def power_limit_mw(self, h: int) -> int:
        return int(
            self._dev(
                "hlml_device_get_power_management_limit", "hlmlDeviceGetPowerManagementLimit", h
            )
        )

    def power_default_limit_mw(self, h: int) -> int:
        return int(
            self._dev(
                "hlml_device_get_power_management_default_limit",
                "hlmlDeviceGetPowerManagementDefaultLimit",
                h,
            )
        )

    def energy_mj(self, h: int) -> int:
        return int(
            self._dev(
                "hlml_device_get_total_energy_consumption",
                "hlmlDeviceGetTotalEnergyConsumption",
                h,
            )
        )

    def clock_mhz(self, h: int, clock: int) -> int:
        return int(self._dev("hlml_device_get_clock_info", "hlmlDeviceGetClockInfo", h, clock))

    def ecc_enabled(self, h: int) -> bool:
        mode = self._dev("hlml_device_get_ecc_mode", "hlmlDeviceGetECCMode", h)
        current = mode.current
        return int(getattr(current, "value", current)) == hlml.FEATURE_ENABLED

    def ecc_errors(self, h: int, error_type: int) -> int:
        return int(
            self._dev(
                "hlml_device_get_total_ecc_errors",
                "hlmlDeviceGetTotalECCErrors",
                h,
                error_type,
                hlml.VOLATILE_ECC,
            )
        )

    def replaced_rows(self, h: int, cause: int) -> int:
        return int(
            self._dev("hlml_device_get_replaced_rows", "hlmlDeviceGetReplacedRowsCount", h, cause)
        )

    def replaced_rows_pending(self, h: int) -> bool:
        pending = self._dev(
            "hlml_device_get_replaced_rows_pending_status",
            "hlmlDeviceGetReplacedRowsPendingStatus",
            h,
        )
        return int(pending) == hlml.FEATURE_ENABLED

    def throttle_reasons(self, h: int) -> int:
        return int(
            self._dev(
                "hlml_device_get_current_clocks_throttle_reasons",
                "hlmlDeviceGetCurrentClocksThrottleReasons",
                h,
            )
        )

    def pcie_throughput(self, h: int, counter: int) -> int:
        return int(
            self._dev("hlml_device_get_pcie_throughput", "hlmlDeviceGetPCIEThroughput", h, counter)
        )

    # -- RoCE ports -----------------------------------------------------------

    def port_masks(self, h: int) -> tuple[int, int]:
        mask, ext = self._dev("hlml_get_mac_addr_info", "hlmlDeviceGetMacAddrInfo", h)
        return (
            sum(int(w) << (64 * i) for i, w in enumerate(mask)),
            sum(int(w) << (64 * i) for i, w in enumerate(ext)),
        )

    def port_up(self, h: int, port: int) -> bool:
        return bool(self._dev("hlml_nic_get_link", "hlmlDeviceNicGetLink", h, port))

    # -- events ---------------------------------------------------------------

    def event_set_create(self) -> int:
        st = self._py("hlml_event_set_create", "hlmlEventSetCreate")
        return int(getattr(st, "value", st) or 0)

    def event_set_free(self, event_set: int) -> None:
        self._py("hlml_event_set_free", "hlmlEventSetFree", ctypes.c_void_p(event_set))

    def register_events(self, h: int, types: int, event_set: int) -> None:
        self._dev(
            "hlml_device_register_events",
            "hlmlDeviceRegisterEvents",
            h,
            types,
            ctypes.c_void_p(event_set),
        )

    def event_set_wait(self, event_set: int, timeout_ms: int) -> tuple[int, int]:
        data = self._py(
            "hlml_event_set_wait", "hlmlEventSetWait", ctypes.c_void_p(event_set), timeout_ms
        )
        return int(data.device or 0), int(data.event_type)
