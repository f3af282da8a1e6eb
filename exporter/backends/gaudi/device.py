"""What the gaudi backend keeps per device, and what each HLML answer means for it.

Why it is built this way:

* Every read goes through ``GaudiCalls.call``, so one rule decides all answers: one
  that means the device is gone (``HLML_ERROR_AIP_IS_LOST``) aborts the read with
  ``DeviceLostError``, so a half-read device is never shown as up; one that stays
  true while the driver is loaded (``NOT_SUPPORTED``, a function the library lacks)
  is remembered per device, so the field is not asked again and nothing is logged;
  ``UNINITIALIZED`` means the library was shut down under the backend, which it
  repairs by initialising again (``HlmlReinit``); anything else (HLML's own
  ``TIMEOUT`` talking to the driver, ``UNKNOWN``) leaves the field out of this poll,
  its reason logged once.
* The field keys (``FIELDS``) are the ones ``MissingFields`` and the docs speak of.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from exporter.backends.base import MissingFields
from exporter.backends.gaudi import hlml
from exporter.backends.gaudi.hlml import Hlml, HlmlError
from exporter.model import DeviceInfo, DeviceLostError

VENDOR = "gaudi"

# Reading key -> hlml_temperature_sensors_t. The chip's own sensor is "gpu", the name
# every vendor's chip temperature has, so one rule reads them all.
TEMPERATURES: tuple[tuple[str, int], ...] = (
    ("gpu", hlml.TEMPERATURE_ON_AIP),
    ("board", hlml.TEMPERATURE_ON_BOARD),
    ("memory", hlml.TEMPERATURE_HBM),
)
# Gaudi has one clock domain in HLML, the SoC clock (IC, MME and TPC are Goya's).
CLOCKS: tuple[tuple[str, int], ...] = (("soc", hlml.CLOCK_SOC),)
ECC: tuple[tuple[str, int], ...] = (
    ("corrected", hlml.MEMORY_ERROR_CORRECTED),
    ("uncorrected", hlml.MEMORY_ERROR_UNCORRECTED),
)
# Replaced (remapped) HBM rows by cause, in the catalogue's remapped-row types.
ROWS: tuple[tuple[str, int], ...] = (
    ("correctable", hlml.ROW_CAUSE_MULTIPLE_SINGLE_BIT),
    ("uncorrectable", hlml.ROW_CAUSE_DOUBLE_BIT),
)
THROTTLE: tuple[tuple[str, int], ...] = (
    ("power_cap", hlml.THROTTLE_POWER),
    ("thermal", hlml.THROTTLE_THERMAL),
)
PCIE: tuple[tuple[str, int], ...] = (("tx", hlml.PCIE_TX_BYTES), ("rx", hlml.PCIE_RX_BYTES))
# HLML does not state the unit of hlml_device_get_pcie_throughput; its API follows
# NVML's call for call, whose same call answers in KB/s, so that is what is assumed.
KIB = 1024.0

FIELDS: tuple[str, ...] = (
    "utilization",
    "memory_used_bytes",
    "memory_total_bytes",
    *(f"temperatures.{k}" for k, _ in TEMPERATURES),
    "power_watts",
    "power_limit_watts",
    "energy_joules",
    *(f"clocks_hz.{k}" for k, _ in CLOCKS),
    *(f"ecc_errors.{k}" for k, _ in ECC),
    *(f"remapped_rows.{k}" for k, _ in ROWS),
    "remapped_rows.pending",
    "throttle",
    *(f"pcie_bytes_per_second.{k}" for k, _ in PCIE),
    "fault_events",
)

# Answers that mean the device itself is gone.
LOST = (hlml.ERROR_AIP_IS_LOST,)
# Answers that stay true while the library is loaded: remembered, asked no more. An
# INVALID_ARGUMENT for a handle that works is an enumeration value (a sensor, say)
# that this library release does not know.
STATIC = (hlml.ERROR_NOT_SUPPORTED, hlml.FUNCTION_NOT_FOUND, hlml.ERROR_INVALID_ARGUMENT)
# Answers that are normal for some fields at some times: no log line.
QUIET = (hlml.ERROR_NO_DATA,)


@dataclass
class Gaudi:
    """One Gaudi: its identity, its HLML handle and what stays true between polls."""

    info: DeviceInfo
    handle: int
    index: int
    serial: str = ""
    # Field key -> why it can never be read on this device while the driver is loaded.
    static: dict[str, str] = field(default_factory=dict)
    lost: bool = False
    # Whether its events are registered (else static["fault_events"] says why).
    events_registered: bool = False
    # Whether to ask for the enforced power limit (hlml_device_get_power_management_limit,
    # 1.2x libraries) before the default one.
    enforced_limit: bool = True

    @property
    def name(self) -> str:
        return self.info.device


class HlmlReinit(Exception):
    """HLML answered UNINITIALIZED: the library was shut down under the backend."""


class GaudiCalls:
    """The HLML of one backend, and the ``missing`` reasons its calls leave."""

    def __init__(self, lib: Hlml | None, missing: MissingFields) -> None:
        self.lib = lib
        self.missing = missing

    def call(self, gpu: Gaudi, keys: str | tuple[str, ...], fn: str, *args: Any) -> Any:
        """``lib.fn(gpu.handle, *args)`` for the fields ``keys``; None when HLML cannot
        give them, with the reason recorded in ``missing``."""
        keys = (keys,) if isinstance(keys, str) else keys
        if all(k in gpu.static for k in keys):
            return None
        assert self.lib is not None
        try:
            return getattr(self.lib, fn)(gpu.handle, *args)
        except HlmlError as e:
            self.fail(gpu, keys, e)
            return None

    def fail(self, gpu: Gaudi, keys: tuple[str, ...], e: HlmlError) -> None:
        """What an HLML error means for ``keys`` of ``gpu`` (see the module docstring)."""
        if e.code in LOST:
            raise DeviceLostError(str(e)) from e
        if e.code == hlml.ERROR_UNINITIALIZED:
            raise HlmlReinit(str(e)) from e
        static = gpu.static if e.code in STATIC else None
        self.missing.note(gpu.name, keys, e.reason, static)
        if e.code not in (*STATIC, *QUIET):
            self.missing.warn_once(
                (gpu.name, ",".join(keys), e.reason),
                "%s: HLML gave no %s: %s",
                gpu.name,
                "/".join(keys),
                e,
            )
