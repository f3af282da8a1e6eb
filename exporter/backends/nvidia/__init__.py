"""NVIDIA GPUs through NVML: the backend the registry names, and its parts.

* ``nvml``: the backend class: NVML discovery, reads, and shutdown.
* ``calls``: what each NVML answer means (device lost, unsupported for good, or a
  failure to report once).
* ``device``: the state kept per GPU between polls, and the field keys (``FIELDS``).
* ``gpm``: GPM samples: DRAM bandwidth, and the load of each MIG instance.
* ``mig``: MIG instances as child devices.
* ``nvlink``: which links exist, their error counters and throughput.
* ``events``: Xid events through one NVML event set.
* ``topology``: NVLink peers and the PCIe path between GPUs.
"""

from exporter.backends.nvidia.nvml import NvidiaBackend

__all__ = ["NvidiaBackend"]
