"""The Huawei Ascend backend: DCMI where ``libdcmi.so`` loads and initialises with at
least one chip, else the ``npu-smi`` tool, in one vocabulary.

Why it is built this way:

* **Two sources, one vocabulary.** DCMI (``exporter.backends.ascend.dcmi_reader``)
  gives everything the backend exports; ``npu-smi`` (``exporter.backends.ascend.npusmi``)
  is what a host without the library in reach (a container that mounts only the tool)
  still has, and gives less (no ECC, no clocks: ``docs/vendors/ascend.md``). Both name
  chips in (card, chip) order, so the device names do not depend on the source; which
  source is used, and why DCMI is not, is kept in ``source`` and ``dcmi_reason``.
* **Neither present** is ``BackendUnavailableError`` with both reasons in its one
  message, so the poller logs one line and exports ``accel_exporter_backend_up 0``.
* **Unsupported is not zero.** After every read, each of ``FIELDS`` is either in the
  reading or has its reason in ``self.missing``.
* The library is loaded lazily, in ``discover``; tests hand in a fake library object
  (``dcmi=``) or a loader, and put a fake ``npu-smi`` on PATH.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any, ClassVar

from exporter.backends.ascend import dcmi as dcmi_api
from exporter.backends.ascend import npusmi
from exporter.backends.ascend.dcmi_reader import DcmiReader
from exporter.backends.ascend.device import FIELDS, Npu
from exporter.backends.ascend.npusmi import NpuSmiError, NpuSmiReader
from exporter.backends.base import Backend, BackendOptions, MissingFields
from exporter.model import BackendUnavailableError, DeviceInfo, DeviceLostError, Link, Reading

log = logging.getLogger("accel_exporter.ascend")

Loader = Callable[[], tuple[Any | None, str]]


def _reading_has(r: Reading, key: str) -> bool:
    value = getattr(r, key)
    return bool(value) if isinstance(value, dict) else value is not None


class AscendBackend(Backend):
    name: ClassVar[str] = "ascend"

    def __init__(
        self,
        options: BackendOptions,
        dcmi: Any | None = None,
        loader: Loader | None = None,
        npu_smi_candidates: Sequence[str] = npusmi.CANDIDATES,
        npu_smi_timeout: float = npusmi.DEFAULT_TIMEOUT,
    ) -> None:
        super().__init__(options)
        self._given_dcmi = dcmi
        self._loader = loader or self._load
        self._candidates = tuple(npu_smi_candidates)
        self._timeout = npu_smi_timeout
        self._dcmi: DcmiReader | None = None
        self._smi: NpuSmiReader | None = None
        self._npus: dict[str, Npu] = {}
        # "dcmi" or "npu-smi" once discovered; why DCMI is not used, if it is not.
        self.source = ""
        self.dcmi_reason = ""
        # device -> field key -> why the last read of that device has no value for it.
        self.missing = MissingFields(log)

    def _load(self) -> tuple[Any | None, str]:
        path = self.options.ascend_dcmi_library
        return dcmi_api.load_library((path,) if path else dcmi_api.LIBRARY_CANDIDATES)

    # -- discovery ---------------------------------------------------------------------

    def discover(self) -> list[DeviceInfo]:
        self._dcmi, self._smi, self._npus = None, None, {}
        self.missing.clear()
        lib, reason = (self._given_dcmi, "") if self._given_dcmi is not None else self._loader()
        if lib is not None:
            reader = DcmiReader(lib, self.options, self.missing)
            npus, reason = reader.discover()
            if npus:
                self._dcmi, self.source, self.dcmi_reason = reader, "dcmi", ""
                self._npus = {n.name: n for n in npus}
                log.info("ascend: %d NPUs through DCMI", len(npus))
                return [n.info for n in npus]
        self.dcmi_reason = reason
        path = npusmi.find(self._candidates)
        if path is None:
            raise BackendUnavailableError(
                f"no Ascend NPU: {reason}; and no npu-smi on PATH or in "
                f"{', '.join(self._candidates)}"
            )
        smi = NpuSmiReader(path, self.options, self.missing, self._timeout)
        try:
            npus = smi.discover()
        except NpuSmiError as e:
            raise BackendUnavailableError(f"no Ascend NPU: {reason}; and {e}") from e
        if not npus:
            raise BackendUnavailableError(f"no Ascend NPU: {reason}; npu-smi lists no chip")
        self._smi, self.source = smi, "npu-smi"
        self._npus = {n.name: n for n in npus}
        log.info("ascend: %d NPUs through %s (%s)", len(npus), path, reason)
        return [n.info for n in npus]

    # -- topology ----------------------------------------------------------------------

    def topology(self) -> list[Link]:
        npus = list(self._npus.values())
        if self._dcmi is not None:
            return self._dcmi.topology(npus)
        if self._smi is not None:
            return self._smi.topology(npus)
        return []

    # -- reading -----------------------------------------------------------------------

    def read(self, device: DeviceInfo) -> Reading:
        npu = self._npus.get(device.device)
        if npu is None:
            raise DeviceLostError(f"{device.device} is not known to this backend")
        self.missing.begin(npu.name, npu.static)
        if self._dcmi is not None:
            reading = self._dcmi.read(npu)
        elif self._smi is not None:
            reading = self._smi.read(npu)
        else:
            raise DeviceLostError("the backend has no source (not discovered)")
        if reading.up:
            found = {key for key in FIELDS if _reading_has(reading, key)}
            self.missing.settle(npu.name, FIELDS, found, "not reported by this chip")
        return reading
