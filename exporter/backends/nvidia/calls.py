"""NVML calls and what their failures mean, decided in one place.

Every read of the package goes through ``NvmlCalls``, so one rule set applies to all
of them: an answer that means the GPU itself is gone (``GpuIsLost``, ``GpuNotFound``,
``ResetRequired``, or ``Unknown`` once it has been lost) aborts the whole read with
``DeviceLostError``, so a half-read device is never shown as up; an answer that
cannot change while the driver is loaded (``NotSupported``, ``FunctionNotFound``,
``NoPermission``) is remembered per device, so the field is not asked again and
nothing is logged for it (that is normal, not an error); anything else leaves the
field out for this poll with its reason, logged once (``MissingFields``).
"""

from __future__ import annotations

import logging
from typing import Any

from exporter.backends.base import MissingFields
from exporter.backends.nvidia.device import Gpu
from exporter.model import DeviceLostError

log = logging.getLogger("accel_exporter.nvidia")

# Answers that mean the GPU itself is gone, whatever was asked.
LOST = ("GPU_IS_LOST", "GPU_NOT_FOUND", "RESET_REQUIRED")
# Answers that stay true while the driver is loaded: remembered, asked no more.
STATIC = ("NOT_SUPPORTED", "FUNCTION_NOT_FOUND", "NO_PERMISSION", "DEPRECATED")
# Answers that are normal for some fields at some times: no log line.
QUIET = (
    "NOT_FOUND",
    "NO_DATA",
    "INVALID_ARGUMENT",
    "ARGUMENT_VERSION_MISMATCH",
    "NOT_READY",
    "VGPU_ECC_NOT_SUPPORTED",
)


def codes(nvml: Any, *names: str) -> tuple[int, ...]:
    """NVML_ERROR_* values by name, skipping those an older pynvml does not define."""
    return tuple(
        v for v in (getattr(nvml, f"NVML_ERROR_{n}", None) for n in names) if v is not None
    )


class NvmlCalls:
    """The NVML module of one backend, and the ``missing`` reasons its calls leave."""

    def __init__(self, nvml: Any, missing: MissingFields) -> None:
        self.nvml = nvml
        self.missing = missing

    def attempt(self, gpu: Gpu, fn: str, *args: Any) -> tuple[Any, Any]:
        """Calls one NVML function: (value, None), or (None, the NVMLError). A lost
        device raises DeviceLostError instead, which ends the read."""
        nvml = self.nvml
        try:
            return getattr(nvml, fn)(*args), None
        except nvml.NVMLError as e:
            return None, self.judge(gpu, fn, e)

    def judge(self, gpu: Gpu, fn: str, e: Any) -> Any:
        """The NVMLError ``fn`` raised, returned; DeviceLostError when it means the
        GPU is gone."""
        nvml = self.nvml
        code = getattr(e, "value", None)
        lost = code in codes(nvml, *LOST)
        if lost or (code == nvml.NVML_ERROR_UNKNOWN and gpu.is_lost):
            raise DeviceLostError(f"{fn}: {type(e).__name__}") from e
        return e

    def call(self, gpu: Gpu, keys: str | tuple[str, ...], fn: str, *args: Any) -> Any:
        """Calls one NVML function for the fields ``keys``; None when NVML cannot give
        them, with the reason recorded in ``missing``."""
        keys = (keys,) if isinstance(keys, str) else keys
        if all(k in gpu.static for k in keys):
            return None
        value, err = self.attempt(gpu, fn, *args)
        if err is not None:
            self.record(gpu, keys, err, static_ok=True)
            return None
        return value

    def record(self, gpu: Gpu, keys: tuple[str, ...], err: Any, static_ok: bool = False) -> None:
        """Why NVML gave no ``keys``: the error's name, remembered for good when
        ``static_ok`` and the answer cannot change while the driver is loaded."""
        nvml = self.nvml
        reason = type(err).__name__
        code = getattr(err, "value", None)
        static = gpu.static if static_ok and code in codes(nvml, *STATIC) else None
        self.missing.note(gpu.name, keys, reason, static)
        if code not in codes(nvml, *STATIC, *QUIET):
            # A transient or unexpected failure: say it once per device and field,
            # not once per poll.
            self.missing.warn_once(
                (gpu.name, ",".join(keys), reason),
                "%s: NVML gave no %s: %s",
                gpu.name,
                "/".join(keys),
                reason,
            )


def field_value(nvml: Any, fv: Any) -> float:
    """The number in one ``nvmlFieldValue_t``, from the union member its type names."""
    member = {
        nvml.NVML_VALUE_TYPE_DOUBLE: "dVal",
        nvml.NVML_VALUE_TYPE_UNSIGNED_INT: "uiVal",
        nvml.NVML_VALUE_TYPE_UNSIGNED_LONG: "ulVal",
        nvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG: "ullVal",
        nvml.NVML_VALUE_TYPE_SIGNED_LONG_LONG: "sllVal",
        nvml.NVML_VALUE_TYPE_SIGNED_INT: "siVal",
    }.get(fv.valueType, "ullVal")
    if fv.valueType == getattr(nvml, "NVML_VALUE_TYPE_UNSIGNED_SHORT", -1):
        member = "usVal"
    return float(getattr(fv.value, member))


def init_failure(nvml: Any, e: Any) -> str:
    """Why ``nvmlInit`` failed, in words an operator can act on."""
    code = getattr(e, "value", None)
    if code == nvml.NVML_ERROR_LIBRARY_NOT_FOUND:
        return "NVML library not found (libnvidia-ml.so.1): install the NVIDIA driver"
    if code == nvml.NVML_ERROR_DRIVER_NOT_LOADED:
        return "NVIDIA driver not loaded (nvmlInit: DriverNotLoaded): load the nvidia module"
    if code == nvml.NVML_ERROR_NO_PERMISSION:
        return "no permission to open the NVIDIA devices (nvmlInit: NoPermission)"
    return f"nvmlInit failed: {type(e).__name__}"


def quietly(fn: Any, *args: Any) -> None:
    """Calls a release function whose failure there is nothing useful to do with."""
    try:
        fn(*args)
    except Exception as e:  # shutting down: nothing useful to do with the error
        log.debug("%s: %s", getattr(fn, "__name__", fn), e)
