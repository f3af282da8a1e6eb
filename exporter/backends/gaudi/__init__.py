"""Intel Gaudi accelerators through HLML: the backend the registry names, and its parts.

* ``backend``: the backend class: discovery, reads, re-initialisation and shutdown.
* ``binding``: HLML through Intel's ``pyhlml`` binding, where it is installed.
* ``hlml``: the C API of ``libhlml.so`` through ctypes (declared from ``hlml.h``), the
  fallback.
* ``device``: the state kept per device, the field keys (``FIELDS``), and what each
  HLML answer means.
* ``events``: critical events through one HLML event set.
* ``topology``: RoCE peers from the port masks, and the PCIe path between devices.
"""

from exporter.backends.gaudi.backend import GaudiBackend

__all__ = ["GaudiBackend"]
