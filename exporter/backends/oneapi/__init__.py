"""Intel devices through oneAPI: the backend the registry names, and its parts.

* ``backend``: the backend class: pairs each SYCL device with its telemetry sources,
  reads them, and reports topology.
* ``sycl``: discovery through ``dpctl``, in a child process (``__main__``).
* ``zes``: the ctypes bindings of Level Zero Sysman (``zes_api.h``) and the loader.
* ``sysman``: telemetry through those bindings.
* ``sysfs``: telemetry from the i915/xe driver's files, where Sysman is absent.
* ``device``: the field keys and the "device lost" signal both sources share.
"""

from exporter.backends.oneapi.backend import OneapiBackend

__all__ = ["OneapiBackend"]
