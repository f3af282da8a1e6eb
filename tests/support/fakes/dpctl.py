"""A fake ``dpctl`` module: ``get_devices`` and ``utils.intel_device_info`` over a
device list held in memory.

The oneapi backend takes the module through its constructor, so tests can describe
hosts this machine is not (Intel GPUs on Level Zero and OpenCL, FLAT-mode tiles, an
FPGA emulator, other vendors' OpenCL ICDs). The attribute names and their types are
dpctl 0.22's (``SyclDevice.name``, ``.vendor``, ``.driver_version``,
``.global_mem_size``, ``.device_type`` and ``.backend`` as enums with ``.name``,
``.has_aspect_emulated``, ``.composite_device``); ``tests/exporter/test_oneapi.py`` checks them
against the real module in a subprocess.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from typing import Any


class backend_type(enum.Enum):  # dpctl's own spelling
    all = 1
    cuda = 2
    hip = 3
    level_zero = 4
    opencl = 5


class device_type(enum.Enum):  # dpctl's own spelling
    accelerator = 1
    all = 2
    automatic = 3
    cpu = 4
    custom = 5
    gpu = 6


class SyclDevice:
    def __init__(
        self,
        name: str,
        *,
        backend: str,
        kind: str,
        vendor: str = "Intel(R) Corporation",
        driver_version: str = "1.3.29735",
        global_mem_size: int = 0,
        device_id: int | None = None,
        emulated: bool = False,
        composite: SyclDevice | None = None,
    ) -> None:
        self.name = name
        self.vendor = vendor
        self.driver_version = driver_version
        self.global_mem_size = global_mem_size
        self.backend = backend_type[backend]
        self.device_type = device_type[kind]
        self.has_aspect_emulated = emulated
        self.composite_device = composite
        self.device_id = device_id

    def __repr__(self) -> str:
        return f"<fake SyclDevice [{self.backend}, {self.device_type}, {self.name}]>"


class _Utils:
    @staticmethod
    def intel_device_info(dev: SyclDevice, /) -> dict[str, Any]:
        # dpctl answers {} for a device that is not Intel's.
        return {} if dev.device_id is None else {"device_id": dev.device_id}


class FakeDpctl:
    """Stands where the ``dpctl`` module stands."""

    def __init__(self, devices: Sequence[SyclDevice], broken_backends: Sequence[str] = ()):
        self.devices = list(devices)
        self.broken_backends = set(broken_backends)
        self.utils = _Utils()
        self.calls = 0

    def get_devices(self, backend: str = "all", device_type: str = "all") -> list[SyclDevice]:
        self.calls += 1
        if backend in self.broken_backends:
            raise ValueError(f"no backend {backend!r}")  # what an unloadable adapter gives
        return [
            d
            for d in self.devices
            if backend in ("all", d.backend.name) and device_type in ("all", d.device_type.name)
        ]
