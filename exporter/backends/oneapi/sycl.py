"""Which Intel devices SYCL sees, through ``dpctl``: the oneAPI backend's discovery.

Why it is built this way:

* **Discovery is dpctl's**, because a device that SYCL cannot see cannot run oneAPI
  work, whatever sysfs says. It runs once, in a child process (``python -m
  exporter.backends.oneapi``, which prints the list as JSON and doubles as an
  operator's "what does SYCL see here?"): importing dpctl and initialising the SYCL
  and OpenCL runtimes grows a process by about 130 MiB (11 to 144 MiB RSS on the
  development machine), which the exporter would then carry for its whole life, and
  a runtime that crashes or hangs takes only the child with it (bounded by
  ``DISCOVERY_TIMEOUT_SECONDS``). A host without dpctl loses this backend only, with
  one clear reason. Tests hand in a fake dpctl module; it is listed in-process by the
  same code.
* **One device per card**: the SYCL devices of the ``level_zero`` and ``opencl``
  backends are listed, and a GPU that both list is kept once, from Level Zero. dpctl
  0.22 exposes neither a PCI address nor a UUID, so the two lists are matched by
  (name, device type, PCI device id from ``dpctl.utils.intel_device_info``) as
  multisets: identical cards are interchangeable in dpctl's eyes, and every fact
  dpctl gives about them (name, driver, memory size) is the same for each of them.
  In Level Zero's FLAT hierarchy a multi-tile card is listed once per tile; its
  ``composite_device`` is kept instead, so a card is one device, as the kubelet
  assigns it.
* **Which devices**: those an Intel runtime drives (the SYCL device's vendor string
  names Intel). That includes this machine's AMD EPYC seen through Intel's OpenCL
  CPU runtime (which the backend publishes only when asked), and excludes NVIDIA and
  AMD GPUs that their own OpenCL ICDs list (the ``nvidia`` and ``amd`` backends own
  those) and emulated devices (the FPGA emulator), which are not hardware.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import subprocess
import sys
from dataclasses import dataclass
from typing import Any

from exporter.model import BackendUnavailableError

log = logging.getLogger("accel_exporter.oneapi")

SYCL_BACKENDS = ("level_zero", "opencl")
# How long the child process that lists the SYCL devices may take (runtimes JIT and
# probe devices on first use; a hung one must not keep the backend from trying again).
DISCOVERY_TIMEOUT_SECONDS = 60.0
# The command whose ``main`` is this module's: the package's ``__main__``.
_COMMAND = "exporter.backends.oneapi"


@dataclass(frozen=True)
class Sycl:
    """What dpctl says about one device, as plain values."""

    name: str
    vendor: str
    driver_version: str
    device_type: str
    backend: str
    memory_bytes: int | None
    device_id: int | None

    @property
    def key(self) -> tuple[str, str, int | None]:
        return (self.name, self.device_type, self.device_id)


def list_devices(dpctl: Any | None) -> tuple[list[Sycl], list[str]]:
    """The Intel SYCL devices and what was skipped, with why: from ``dpctl`` when one
    is handed in (tests), else from a child process that imports the real one."""
    if dpctl is not None:
        return sycl_devices(dpctl)
    cmd = [sys.executable, "-m", _COMMAND]
    try:
        proc = subprocess.run(
            cmd, capture_output=True, text=True, timeout=DISCOVERY_TIMEOUT_SECONDS
        )
    except subprocess.TimeoutExpired as e:
        raise BackendUnavailableError(
            f"dpctl did not list the SYCL devices within {DISCOVERY_TIMEOUT_SECONDS:g}s "
            "(a hung SYCL or OpenCL runtime?)"
        ) from e
    except OSError as e:
        raise BackendUnavailableError(f"cannot run {' '.join(cmd)}: {e}") from e
    lines = proc.stdout.strip().splitlines()
    try:
        # The last line is ours; a runtime may have printed before it.
        report = json.loads(lines[-1]) if proc.returncode == 0 and lines else None
    except json.JSONDecodeError:
        report = None
    if not isinstance(report, dict):
        how = (
            f"killed by signal {-proc.returncode}"
            if proc.returncode < 0
            else f"exit status {proc.returncode}"
        )
        last = (proc.stderr.strip().splitlines() or ["no message"])[-1]
        raise BackendUnavailableError(f"listing the SYCL devices failed ({how}): {last}")
    if "error" in report:
        raise BackendUnavailableError(str(report["error"]))
    devices = [Sycl(**d) for d in report["devices"]]
    return devices, [str(x) for x in report["skipped"]]


def _attr(obj: Any, name: str, default: Any = None) -> Any:
    """One dpctl property; a query the runtime refuses is the default."""
    try:
        return getattr(obj, name)
    except Exception:
        return default


def _enum_name(value: Any) -> str:
    return str(_attr(value, "name", value) or "")


def _describe(dpctl: Any, dev: Any, backend: str) -> Sycl:
    try:
        info = dpctl.utils.intel_device_info(dev)
    except Exception:
        info = {}
    device_id = info.get("device_id") if isinstance(info, dict) else None
    memory = _attr(dev, "global_mem_size")
    return Sycl(
        name=str(_attr(dev, "name", "") or "").strip(),
        vendor=str(_attr(dev, "vendor", "") or "").strip(),
        driver_version=str(_attr(dev, "driver_version", "") or "").strip(),
        device_type=_enum_name(_attr(dev, "device_type", "")) or "unknown",
        backend=backend,
        memory_bytes=int(memory) if memory else None,
        device_id=int(device_id) if device_id else None,
    )


def sycl_devices(dpctl: Any) -> tuple[list[Sycl], list[str]]:
    """The Intel devices SYCL sees, Level Zero first, each physical device once; and
    what was skipped, with why."""
    kept: list[Sycl] = []
    skipped: list[str] = []
    level_zero: dict[tuple[str, str, int | None], int] = {}
    for backend in SYCL_BACKENDS:
        try:
            found = list(dpctl.get_devices(backend=backend))
        except Exception as e:  # an adapter that fails to load lists nothing
            log.debug("oneapi: dpctl.get_devices(backend=%r): %s", backend, e)
            continue
        composites: list[Any] = []
        for dev in found:
            composite = _attr(dev, "composite_device") if backend == "level_zero" else None
            if composite is not None:
                # One tile of a card in FLAT mode: the card is the device.
                if any(composite == c for c in composites):
                    continue
                composites.append(composite)
                dev = composite
            s = _describe(dpctl, dev, backend)
            if "intel" not in s.vendor.lower():
                skipped.append(f"{s.name} ({backend}, vendor {s.vendor!r}): not an Intel runtime")
                continue
            if _attr(dev, "has_aspect_emulated", False):
                skipped.append(f"{s.name} ({backend}): emulated, not hardware")
                continue
            if backend == "level_zero":
                level_zero[s.key] = level_zero.get(s.key, 0) + 1
            elif level_zero.get(s.key, 0) > 0:
                level_zero[s.key] -= 1  # the same device, already kept from Level Zero
                continue
            kept.append(s)
    return kept, skipped


def main() -> int:
    """``python -m exporter.backends.oneapi``: the Intel SYCL devices dpctl sees, as
    one JSON line (what ``discover()`` reads from its child process)."""
    try:
        import dpctl
        import dpctl.utils  # intel_device_info lives there
    except Exception as e:  # a broken SYCL runtime can fail in other ways than ImportError
        report: dict[str, Any] = {
            "error": f"the dpctl module is not usable ({type(e).__name__}: {e}): "
            "install accel-fleet[oneapi]"
        }
    else:
        devices, skipped = sycl_devices(dpctl)
        report = {"devices": [dataclasses.asdict(d) for d in devices], "skipped": skipped}
    print(json.dumps(report))
    return 0
