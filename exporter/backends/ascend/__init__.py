"""Huawei Ascend NPUs: the backend the registry names, and its parts.

* ``backend``: the backend class: chooses the source (DCMI, else npu-smi), reads, and
  reports topology.
* ``dcmi``: the ctypes layer on ``libdcmi.so``: structures, return codes, typed calls.
* ``dcmi_reader``: the DCMI source: discovery, one chip's poll, HCCS topology.
* ``npusmi``: the ``npu-smi`` source: fixed command lines with a timeout, and parsers.
* ``device``: the state kept per chip, the field keys, and the health/fault-code events
  both sources share.
"""

from exporter.backends.ascend.backend import AscendBackend

__all__ = ["AscendBackend"]
