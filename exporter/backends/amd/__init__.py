"""AMD GPUs: the backend the registry names, and its parts.

* ``backend``: the backend class: chooses the source, reads, and reports topology.
* ``smi``: the AMD SMI source (``amdsmi``, imported quietly and lazily).
* ``sysfs``: the amdgpu sysfs source (busy percentages, VRAM, RAS, hwmon).
* ``gpu_metrics``: the binary ``gpu_metrics`` table: layouts, parser, rates.
* ``device``: the state kept per GPU, the field keys, and what both sources share.
* ``partitions``: MI300 compute partitions as child devices.
* ``kfd``: the amdkfd topology in sysfs: xGMI links, and the nodes partitions use.
"""

from exporter.backends.amd.backend import AmdBackend

__all__ = ["AmdBackend"]
